"""The dashboard's ASGI app: :func:`dashboard_app` (the app factory), and
:class:`Dashboard`, which joins the page groups and holds the route table and the guard
every page is behind (the access check, every error as a page of its own).

Pages are server-rendered HTML that work without JavaScript; the vendored htmx only
refreshes their live sections (a request with ``HX-Request`` gets that section alone).
Every page reads through the Engine API, so the app works on any store.

The navigation (:data:`~pikku_mongo.dashboard.links.NAV`) and the route table
(:meth:`Dashboard.routes`) are lists: a page is one entry in each, plus its handler in
its page group (``run_pages``, ``queue_pages``, ``schedule_pages``, ``login_pages``) and
its template.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from engine_core import (
    Engine,
    EngineError,
    RunNotFoundError,
    ScheduleNotFoundError,
    StoreUnavailableError,
)
from pikku_mongo.dashboard.bulk_pages import BulkPages
from pikku_mongo.dashboard.headers import SecurityHeaders, ShowingUndecodable
from pikku_mongo.dashboard.links import NAV, Links, NavItem
from pikku_mongo.dashboard.login_pages import LoginPages
from pikku_mongo.dashboard.metrics_page import MetricsPage
from pikku_mongo.dashboard.params import BadRequest
from pikku_mongo.dashboard.queue_pages import QueuePages
from pikku_mongo.dashboard.rendering import HERE, is_htmx, links_for, log, redirect
from pikku_mongo.dashboard.run_pages import RunPages
from pikku_mongo.dashboard.schedule_pages import SchedulePages
from pikku_mongo.dashboard.security import AuthCallable, Denied, Security
from pikku_mongo.dashboard.worker_pages import WorkerPages

__all__ = ["NAV", "Dashboard", "Links", "NavItem", "dashboard_app"]

Handler = Callable[[Request], Awaitable[Response]]


class Dashboard(RunPages, BulkPages, QueuePages, SchedulePages, WorkerPages, LoginPages):
    """The dashboard's pages over one Engine; :func:`dashboard_app` builds its app."""

    def routes(self) -> list[BaseRoute]:
        """Every route. Static files need no access check: they are the package's own."""
        return [
            Route("/", self._guard(self.index), name="index"),
            Route("/runs", self._guard(self.runs), name="runs"),
            Route("/runs/confirm", self._guard(self.bulk_confirm), name="bulk_confirm"),
            Route(
                "/runs/action", self._guard(self.bulk_action), methods=["POST"], name="bulk_action"
            ),
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
            Route("/workers", self._guard(self.workers), name="workers"),
            Route("/login", self._guard(self.login, public=True), methods=["GET", "POST"]),
            Route("/logout", self._guard(self.logout, public=True), methods=["POST"]),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ]

    def _denied(self, request: Request, denied: Denied) -> Response:
        if denied.login and request.method == "GET" and not is_htmx(request):
            return redirect(links_for(request).login())
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
            except StoreUnavailableError as exc:
                log.warning("dashboard page %s: the database cannot be reached (%s)",
                            request.url.path, exc)  # fmt: skip
                return self.error(
                    request,
                    503,
                    f"The database cannot be reached ({exc}). This page works again once it "
                    "is back; nothing was changed.",
                )
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


def dashboard_app(
    engine: Engine,
    *,
    auth: AuthCallable | None = None,
    token: str | None = None,
    read_only: bool = False,
    trace_url: str | None = None,
    title: str = "pikku-mongo",
    secret: str | bytes | None = None,
    trusted_origins: Sequence[str] = (),
    refresh_seconds: float = 5.0,
    metrics: bool = False,
) -> Starlette:
    """The dashboard as an ASGI app, to serve or to mount under a path in an existing
    Starlette or FastAPI app (``app.mount("/ops", dashboard_app(engine, auth=...))``).

    - ``auth``: ``auth(request) -> bool`` (or awaitable), the host app's own check.
    - ``token``: requests need ``Authorization: Bearer <token>`` or a session from the
      login form. With neither ``auth`` nor ``token`` only loopback clients are served.
    - ``read_only``: no actions are offered and every action POST is refused.
    - ``trace_url``: a link template for the run's trace, such as
      ``"https://jaeger.example/trace/{trace_id}"``.
    - ``secret``: the key of the CSRF tokens, ``str`` or ``bytes``; give the same one to
      every process that serves the dashboard behind one address (default: the
      environment's ``PIKKU_DASHBOARD_SECRET``, else derived from ``token``, else random
      per process, with a warning when several processes seem to serve).
    - ``trusted_origins``: origins (``https://ops.example``) allowed to POST besides
      the request's own host, for a proxy that rewrites ``Host``.
    - ``refresh_seconds``: how often the live sections refresh.
    - ``metrics``: serve ``/metrics``, the engine's metrics in Prometheus text (behind
      the same access check; needs ``pip install 'pikku-mongo[metrics]'``).

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
    routes = dashboard.routes()
    if metrics:
        page = MetricsPage()
        routes.insert(0, Route("/metrics", dashboard._guard(page.metrics), name="metrics"))
    return Starlette(
        routes=routes,
        middleware=[Middleware(SecurityHeaders), Middleware(ShowingUndecodable)],
        exception_handlers={HTTPException: dashboard.http_error},
    )
