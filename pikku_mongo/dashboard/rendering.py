"""What every page group of the dashboard shares: :class:`PageBase` (the engine and the
settings, the Jinja environment, rendering, error pages and the checks of a POST), and
the request helpers (is it htmx, the links under its mount, a redirect)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from engine_core import Engine
from pikku_mongo.dashboard.links import NAV, Links
from pikku_mongo.dashboard.params import format_time_input, read_form
from pikku_mongo.dashboard.security import CSRF_COOKIE, CSRF_FIELD, SESSION_COOKIE, Security
from pikku_mongo.dashboard.views import (
    error_text,
    fmt_clock,
    fmt_duration,
    fmt_interval,
    fmt_relative,
    fmt_time,
    show_value,
)

#: The dashboard's logger: actions carried out, pages that failed.
log = logging.getLogger("pikku_mongo.dashboard")

HERE = Path(__file__).resolve().parent


def is_htmx(request: Request) -> bool:
    """Whether htmx asks for a page's live section alone."""
    return request.headers.get("hx-request") == "true"


def links_for(request: Request) -> Links:
    """Links under the path this request reached the dashboard at (its mount)."""
    return Links(request.scope.get("root_path", ""))


def redirect(url: str) -> Response:
    """See other: where a page sends the browser after a POST (or a bare root)."""
    return RedirectResponse(url, status_code=303)


class PageBase:
    """The engine and the settings every page group reads, and what they render with."""

    def __init__(
        self,
        engine: Engine,
        *,
        security: Security,
        read_only: bool = False,
        trace_url: str | None = None,
        title: str = "pikku-mongo",
        refresh_seconds: float = 5.0,
    ) -> None:
        if trace_url is not None and (
            "{trace_id}" not in trace_url or not trace_url.startswith(("http://", "https://"))
        ):
            raise ValueError(
                "trace_url must be an http(s) URL containing {trace_id}, "
                f"such as https://tracing.example/trace/{{trace_id}} (got {trace_url!r})"
            )
        if not 0.5 <= refresh_seconds <= 3600:
            raise ValueError("refresh_seconds must be between 0.5 and 3600")
        self.engine = engine
        self.security = security
        self.read_only = read_only
        self.trace_url = trace_url
        self.title = title
        self.refresh_seconds = refresh_seconds
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.globals.update(
            fmt_time=fmt_time,
            fmt_clock=fmt_clock,
            fmt_duration=fmt_duration,
            fmt_interval=fmt_interval,
            fmt_relative=fmt_relative,
            show_value=show_value,
            error_text=error_text,
            format_time_input=format_time_input,
        )

    def render(
        self, request: Request, template: str, context: dict[str, Any], code: int = 200
    ) -> Response:
        """A page (or, for htmx, a fragment) with the CSRF token of this browser."""
        cookie, new = self.security.csrf_cookie(request)
        context = {"page": None, **context}
        html = self.env.get_template(template).render(
            links=links_for(request),
            nav=NAV,
            title=self.title,
            read_only=self.read_only,
            login_enabled=self.security.login_enabled,
            signed_in=self.security.session_ok(request.cookies.get(SESSION_COOKIE)),
            csrf_field=CSRF_FIELD,
            csrf_token=self.security.csrf_token(cookie),
            refresh_seconds=self.refresh_seconds,
            **context,
        )
        response = Response(html, code, media_type="text/html")
        response.headers["cache-control"] = "no-store"
        response.headers["vary"] = "HX-Request, Cookie"
        if new:
            self.set_cookie(request, response, CSRF_COOKIE, cookie, max_age=None)
        return response

    def set_cookie(
        self, request: Request, response: Response, name: str, value: str, max_age: int | None
    ) -> None:
        """Set a cookie for the dashboard's own path (http-only, strict, secure on https)."""
        response.set_cookie(
            name,
            value,
            max_age=max_age,
            path=links_for(request).root or "/",
            secure=request.url.scheme == "https",
            httponly=True,
            samesite="strict",
        )

    def error(self, request: Request, status: int, message: str) -> Response:
        """An error page with its HTTP status."""
        return self.render(request, "error.html", {"code": status, "message": message}, status)

    def render_confirm(
        self,
        request: Request,
        action: Any,
        subject: str,
        record: Any,
        key: tuple[str, str],
        post_to: str,
        back: tuple[str, str],
        extra: Sequence[tuple[str, str]] = (),
        *,
        question: str | None = None,
        facts: Sequence[tuple[str, str]] = (),
    ) -> Response:
        """The confirm step of an ``action`` on a run or a schedule (``subject``), one
        template for both: the ``record``'s facts (and ``facts``, shown only), and a
        form that posts the ``key`` (field, value), the ``extra`` fields and the action to
        ``post_to``; ``back`` is the way back (link, label); ``question`` the page's
        heading (else "Cancel this run?" and the like)."""
        context = {
            "question": question or f"{action.label} this {subject}?",
            "facts": list(facts),
            "page": f"{subject}s",
            "action": action,
            "subject": subject,
            subject: record,
            "field": key[0],
            "key": key[1],
            "post_to": post_to,
            "back_to": back[0],
            "back_label": back[1],
            "extra": list(extra),
        }
        return self.render(request, "confirm.html", context)

    async def posted(self, request: Request, *, changes: bool) -> dict[str, list[str]] | Response:
        """The form of a POST that passed the cross-site checks, or the error page to
        answer with (a POST that ``changes`` runs or schedules is refused when read-only)."""
        if changes and self.read_only:
            return self.error(request, 403, "this dashboard is read-only")
        form = await read_form(request)
        denied = self.security.check_post(request, form)
        if denied is not None:
            return self.error(request, denied.status, denied.message)
        return form
