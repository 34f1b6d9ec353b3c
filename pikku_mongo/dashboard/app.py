"""The dashboard's ASGI app: its route table, its pages and its actions.

Pages are server-rendered HTML that work without JavaScript; the vendored htmx only
refreshes their live sections (a request with ``HX-Request`` gets that section alone).
Every page reads through the Engine API, so the app works on any store.

The navigation (:data:`NAV`) and the route table (:meth:`Dashboard.routes`) are lists:
a page is one entry in each, plus its template.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine_core import Engine, EngineError, RunNotFoundError, ScheduleNotFoundError
from engine_core.records import TERMINAL
from pikku_mongo.dashboard.actions import (
    ACTIONS,
    SCHEDULE_ACTIONS,
    Action,
    ScheduleAction,
    actions_for,
    perform,
    perform_on_schedule,
    schedule_actions_for,
)
from pikku_mongo.dashboard.params import (
    LIMITS,
    RUN_STATUSES,
    BadRequest,
    format_time_input,
    parse_choice,
    parse_run_filters,
    parse_run_id,
    parse_schedule_name,
    read_form,
)
from pikku_mongo.dashboard.security import (
    CSRF_COOKIE,
    CSRF_FIELD,
    SESSION_COOKIE,
    SESSION_SECONDS,
    AuthCallable,
    Denied,
    Security,
)
from pikku_mongo.dashboard.views import (
    build_timeline,
    error_text,
    fmt_clock,
    fmt_duration,
    fmt_relative,
    fmt_time,
    show_value,
)

log = logging.getLogger("pikku_mongo.dashboard")

HERE = Path(__file__).resolve().parent
Handler = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True)
class NavItem:
    """A top-level page: its route name, its label and its path."""

    name: str
    label: str
    path: str


#: The top navigation.
NAV: tuple[NavItem, ...] = (
    NavItem("runs", "Runs", "/runs"),
    NavItem("queues", "Queues", "/queues"),
    NavItem("schedules", "Schedules", "/schedules"),
)

#: On every response: no framing (clickjacking of the action buttons), scripts and
#: styles from this app only, no referrer sent elsewhere.
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
}


class _SecurityHeaders:
    """ASGI middleware that adds :data:`SECURITY_HEADERS` to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)


class Links:
    """URLs of the dashboard's pages, under the path it is mounted at."""

    def __init__(self, root: str) -> None:
        self.root = root

    def runs(self, query: str = "") -> str:
        """The runs list, with ``query`` (``?...``) as its filters."""
        return f"{self.root}/runs{query}"

    def run(self, run_id: str, **extra: str) -> str:
        """A run's page: the id travels URL-encoded in the query, whatever it holds."""
        return f"{self.root}/run?{urlencode({'id': run_id, **extra})}"

    def confirm(self) -> str:
        """The confirm page of an action (a GET form's target)."""
        return f"{self.root}/run/confirm"

    def action(self) -> str:
        """Where confirmed actions are posted."""
        return f"{self.root}/run/action"

    def queues(self) -> str:
        """The queues page."""
        return f"{self.root}/queues"

    def schedules(self, **extra: str) -> str:
        """The schedules page (``done`` and ``name`` say what an action just did)."""
        query = f"?{urlencode(extra)}" if extra else ""
        return f"{self.root}/schedules{query}"

    def schedule_confirm(self) -> str:
        """The confirm page of a schedule action (a GET form's target)."""
        return f"{self.root}/schedules/confirm"

    def schedule_action(self) -> str:
        """Where confirmed schedule actions are posted."""
        return f"{self.root}/schedules/action"

    def login(self) -> str:
        """The login form."""
        return f"{self.root}/login"

    def logout(self) -> str:
        """Where logging out is posted."""
        return f"{self.root}/logout"

    def static(self, name: str) -> str:
        """A file served from the package's ``static/`` folder."""
        return f"{self.root}/static/{name}"

    def page(self, item: NavItem) -> str:
        """A top-level page of the navigation."""
        return f"{self.root}{item.path}"


def _is_htmx(request: Request) -> bool:
    return request.headers.get("hx-request") == "true"


def _links(request: Request) -> Links:
    """Links under the path this request reached the dashboard at (its mount)."""
    return Links(request.scope.get("root_path", ""))


def _redirect(url: str) -> Response:
    return RedirectResponse(url, status_code=303)


class Dashboard:
    """The dashboard's pages over one Engine; :func:`dashboard_app` builds its app."""

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
            fmt_relative=fmt_relative,
            show_value=show_value,
            error_text=error_text,
            format_time_input=format_time_input,
        )

    # ---- the route table ----------------------------------------------------------

    def routes(self) -> list[BaseRoute]:
        """Every route. Static files need no access check: they are the package's own."""
        return [
            Route("/", self._guard(self.index), name="index"),
            Route("/runs", self._guard(self.runs), name="runs"),
            Route("/run", self._guard(self.run), name="run"),
            Route("/run/confirm", self._guard(self.confirm), name="confirm"),
            Route("/run/action", self._guard(self.action), methods=["POST"], name="action"),
            Route("/queues", self._guard(self.queues), name="queues"),
            Route("/schedules", self._guard(self.schedules), name="schedules"),
            Route(
                "/schedules/confirm", self._guard(self.schedule_confirm), name="schedule_confirm"
            ),
            Route(
                "/schedules/action",
                self._guard(self.schedule_action),
                methods=["POST"],
                name="schedule_action",
            ),
            Route("/login", self._guard(self.login, public=True), methods=["GET", "POST"]),
            Route("/logout", self._guard(self.logout, public=True), methods=["POST"]),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ]

    # ---- rendering ----------------------------------------------------------------

    def render(
        self, request: Request, template: str, context: dict[str, Any], code: int = 200
    ) -> Response:
        """A page (or, for htmx, a fragment) with the CSRF token of this browser."""
        cookie, new = self.security.csrf_cookie(request)
        context = {"page": None, **context}
        html = self.env.get_template(template).render(
            links=_links(request),
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
            self._set_cookie(request, response, CSRF_COOKIE, cookie, max_age=None)
        return response

    def _set_cookie(
        self, request: Request, response: Response, name: str, value: str, max_age: int | None
    ) -> None:
        response.set_cookie(
            name,
            value,
            max_age=max_age,
            path=_links(request).root or "/",
            secure=request.url.scheme == "https",
            httponly=True,
            samesite="strict",
        )

    def error(self, request: Request, status: int, message: str) -> Response:
        """An error page with its HTTP status."""
        return self.render(request, "error.html", {"code": status, "message": message}, status)

    def _denied(self, request: Request, denied: Denied) -> Response:
        if denied.login and request.method == "GET" and not _is_htmx(request):
            return _redirect(_links(request).login())
        return self.error(request, denied.status, denied.message)

    def _guard(self, handler: Handler, *, public: bool = False) -> Handler:
        """``handler`` behind the access check (unless ``public``), with every error as a
        page of its own (never a traceback)."""

        async def endpoint(request: Request) -> Response:
            if not public:
                denied = await self.security.check_access(request)
                if denied is not None:
                    return self._denied(request, denied)
            try:
                return await handler(request)
            except BadRequest as exc:
                return self.error(request, 400, str(exc))
            except (RunNotFoundError, ScheduleNotFoundError) as exc:
                return self.error(request, 404, str(exc))
            except (EngineError, ValueError) as exc:
                return self.error(request, 400, str(exc))
            except Exception as exc:
                log.exception("dashboard page %s failed", request.url.path)
                return self.error(
                    request, 500, f"the page could not be drawn ({type(exc).__name__})"
                )

        return endpoint

    async def http_error(self, request: Request, exc: Exception) -> Response:
        """Starlette's own errors (no such page, wrong method) as dashboard pages."""
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        detail = exc.detail if isinstance(exc, HTTPException) else "error"
        return self.error(request, status, str(detail))

    # ---- pages --------------------------------------------------------------------

    async def index(self, request: Request) -> Response:
        """The root: the runs list."""
        return _redirect(_links(request).runs())

    async def runs(self, request: Request) -> Response:
        """The runs list: counts by status, filters, a keyset-paginated page."""
        filters = parse_run_filters(request.query_params)
        found, counts = await asyncio.gather(
            self.engine.list_runs(
                workflow=filters.workflow,
                status=filters.status,
                limit=filters.limit + 1,
                after=filters.after,
                prefix=filters.prefix,
                created_since=filters.since,
                created_before=filters.before,
            ),
            self.engine.count_runs(filters.workflow),
        )
        statuses = list(RUN_STATUSES) + sorted(set(counts) - set(RUN_STATUSES))
        context: dict[str, Any] = {
            "filters": filters,
            "runs": found[: filters.limit],
            "more": len(found) > filters.limit,
            "counts": [(s, counts.get(s, 0)) for s in statuses],
            "total": sum(counts.values()),
        }
        if _is_htmx(request):
            return self.render(request, "_runs_live.html", context)
        workflows = await self.engine.list_workflows()
        if filters.workflow is not None and filters.workflow not in workflows:
            workflows.append(filters.workflow)
        context.update(page="runs", workflows=workflows, statuses=RUN_STATUSES, limits=LIMITS)
        return self.render(request, "runs.html", context)

    async def run(self, request: Request) -> Response:
        """One run: its values, family, steps, timeline and actions."""
        run_id = parse_run_id(request.query_params)
        done = request.query_params.get("done")
        status, history, children = await asyncio.gather(
            self.engine.status(run_id),
            self.engine.history(run_id),
            self.engine.list_children(run_id),
        )
        context: dict[str, Any] = {
            "page": "runs",
            "run": status,
            "active": status.status not in TERMINAL,
            "timeline": build_timeline(status, history),
            "children": children,
            "actions": [] if self.read_only else actions_for(status.status),
            "notice": ACTIONS[done].done if done in ACTIONS else None,
            "trace_link": (
                self.trace_url.replace("{trace_id}", status.trace_id)
                if self.trace_url and status.trace_id
                else None
            ),
        }
        template = "_run_live.html" if _is_htmx(request) else "run.html"
        return self.render(request, template, context)

    async def _applicable(
        self, request: Request, source: Any
    ) -> tuple[str, Action, Any] | Response:
        if self.read_only:
            return self.error(request, 403, "this dashboard is read-only")
        run_id = parse_run_id(source)
        action = ACTIONS[parse_choice(source, "action", tuple(ACTIONS))]
        status = await self.engine.status(run_id)
        if status.status not in action.applies_to:
            return self.error(
                request,
                409,
                f"run {run_id!r} is {status.status}: {action.label.lower()} applies to "
                f"{' or '.join(sorted(action.applies_to))} runs only",
            )
        return run_id, action, status

    async def confirm(self, request: Request) -> Response:
        """The confirm step of an action (the page a browser without JavaScript gets)."""
        checked = await self._applicable(request, request.query_params)
        if isinstance(checked, Response):
            return checked
        _, action, status = checked
        context = {"page": "runs", "run": status, "action": action}
        return self.render(request, "confirm.html", context)

    async def action(self, request: Request) -> Response:
        """Carry out a confirmed action (a POST with a valid CSRF token), then show the run."""
        form = await self._posted(request, changes=True)
        if isinstance(form, Response):
            return form
        checked = await self._applicable(request, form)
        if isinstance(checked, Response):
            return checked
        run_id, action, _ = checked
        await perform(self.engine, action, run_id)
        log.info("dashboard: %s on run %r", action.name, run_id)
        return _redirect(_links(request).run(run_id, done=action.name))

    async def queues(self, request: Request) -> Response:
        """The queues: limits, depth, running and admissions per minute, refreshed live."""
        context: dict[str, Any] = {
            "page": "queues",
            "queues": await self.engine.list_queues(),
            "queued_runs": _links(request).runs("?" + urlencode({"status": "queued"})),
        }
        template = "_queues_live.html" if _is_htmx(request) else "queues.html"
        return self.render(request, template, context)

    async def schedules(self, request: Request) -> Response:
        """The schedules: timing, next fire, input, and their actions."""
        done = request.query_params.get("done")
        name = request.query_params.get("name")
        action = SCHEDULE_ACTIONS.get(done or "")
        schedules = await self.engine.list_schedules()
        notice = None
        if action is not None and name:
            # Said only when it holds now (the query string alone proves nothing).
            paused = {s.name: s.paused for s in schedules}.get(name)
            holds = {"pause": paused is True, "resume": paused is False, "delete": paused is None}
            if holds.get(action.name):
                notice = f"Schedule {name} {action.done}."
        context: dict[str, Any] = {
            "page": "schedules",
            "schedules": schedules,
            "actions_for": (lambda paused: []) if self.read_only else schedule_actions_for,
            "notice": notice,
        }
        template = "_schedules_live.html" if _is_htmx(request) else "schedules.html"
        return self.render(request, template, context)

    async def _schedule_applicable(
        self, request: Request, source: Any
    ) -> tuple[str, ScheduleAction, Any] | Response:
        if self.read_only:
            return self.error(request, 403, "this dashboard is read-only")
        name = parse_schedule_name(source)
        action = SCHEDULE_ACTIONS[parse_choice(source, "action", tuple(SCHEDULE_ACTIONS))]
        found = [s for s in await self.engine.list_schedules() if s.name == name]
        if not found:
            raise ScheduleNotFoundError(f"no schedule is named {name!r}")
        schedule = found[0]
        if not action.applies(schedule.paused):
            state = "paused" if schedule.paused else "not paused"
            return self.error(
                request, 409, f"schedule {name!r} is {state}: it cannot be {action.done}"
            )
        return name, action, schedule

    async def schedule_confirm(self, request: Request) -> Response:
        """The confirm step of a schedule action (the page a browser without JavaScript
        gets)."""
        checked = await self._schedule_applicable(request, request.query_params)
        if isinstance(checked, Response):
            return checked
        _, action, schedule = checked
        context = {"page": "schedules", "schedule": schedule, "action": action}
        return self.render(request, "schedule_confirm.html", context)

    async def schedule_action(self, request: Request) -> Response:
        """Carry out a confirmed schedule action (a POST with a valid CSRF token), then
        show the schedules."""
        form = await self._posted(request, changes=True)
        if isinstance(form, Response):
            return form
        checked = await self._schedule_applicable(request, form)
        if isinstance(checked, Response):
            return checked
        name, action, _ = checked
        await perform_on_schedule(self.engine, action, name)
        log.info("dashboard: %s on schedule %r", action.name, name)
        return _redirect(_links(request).schedules(done=action.name, name=name))

    async def _posted(self, request: Request, *, changes: bool) -> dict[str, list[str]] | Response:
        """The form of a POST that passed the cross-site checks, or the error page to
        answer with (a POST that ``changes`` runs or schedules is refused when read-only)."""
        if changes and self.read_only:
            return self.error(request, 403, "this dashboard is read-only")
        form = await read_form(request)
        denied = self.security.check_post(request, form)
        if denied is not None:
            return self.error(request, denied.status, denied.message)
        return form

    async def login(self, request: Request) -> Response:
        """The login form (a token is set), and its POST, which sets the session cookie."""
        if not self.security.login_enabled:
            return _redirect(_links(request).runs())
        if request.method == "GET":
            return self.render(request, "login.html", {"page": "login", "failed": False})
        form = await self._posted(request, changes=False)
        if isinstance(form, Response):
            return form
        given = form.get("token", [""])
        if len(given) != 1 or not self.security.token_matches(given[0]):
            await asyncio.sleep(0.2)  # slows guessing down a little
            return self.render(request, "login.html", {"page": "login", "failed": True}, 401)
        response = _redirect(_links(request).runs())
        session = self.security.new_session()
        self._set_cookie(request, response, SESSION_COOKIE, session, max_age=SESSION_SECONDS)
        return response

    async def logout(self, request: Request) -> Response:
        """End the session (a POST with a valid CSRF token)."""
        form = await self._posted(request, changes=False)
        if isinstance(form, Response):
            return form
        response = _redirect(_links(request).login())
        response.delete_cookie(SESSION_COOKIE, path=_links(request).root or "/")
        return response


def dashboard_app(
    engine: Engine,
    *,
    auth: AuthCallable | None = None,
    token: str | None = None,
    read_only: bool = False,
    trace_url: str | None = None,
    title: str = "pikku-mongo",
    secret: bytes | None = None,
    trusted_origins: Sequence[str] = (),
    refresh_seconds: float = 5.0,
) -> Starlette:
    """The dashboard as an ASGI app, to serve or to mount under a path in an existing
    Starlette or FastAPI app (``app.mount("/ops", dashboard_app(engine, auth=...))``).

    - ``auth``: ``auth(request) -> bool`` (or awaitable), the host app's own check.
    - ``token``: requests need ``Authorization: Bearer <token>`` or a session from the
      login form. With neither ``auth`` nor ``token`` only loopback clients are served.
    - ``read_only``: no actions are offered and every action POST is refused.
    - ``trace_url``: a link template for the run's trace, such as
      ``"https://jaeger.example/trace/{trace_id}"``.
    - ``secret``: the key of the CSRF tokens (random per app unless given; give the same
      one to every process that serves the dashboard behind one address).
    - ``trusted_origins``: origins (``https://ops.example``) allowed to POST besides
      the request's own host, for a proxy that rewrites ``Host``.
    - ``refresh_seconds``: how often the live sections refresh.

    The app calls only the Engine API and never starts runs, so a client engine (not
    inside ``async with``) with no workflows registered serves it fully.
    """
    security = Security(token=token, auth=auth, secret=secret, trusted_origins=trusted_origins)
    dashboard = Dashboard(
        engine,
        security=security,
        read_only=read_only,
        trace_url=trace_url,
        title=title,
        refresh_seconds=refresh_seconds,
    )
    return Starlette(
        routes=dashboard.routes(),
        middleware=[Middleware(_SecurityHeaders)],
        exception_handlers={HTTPException: dashboard.http_error},
    )
