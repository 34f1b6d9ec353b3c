"""The pikku-mongo web dashboard: see and steer runs in a browser.

``dashboard_app(engine)`` returns an ASGI app (Starlette) built on the Engine API only;
serve it with ``pikku-mongo ui`` or mount it in an existing Starlette or FastAPI app::

    app.mount("/ops", dashboard_app(engine, auth=is_operator))

Needs the ``ui`` extra: ``pip install 'pikku-mongo[ui]'`` (Starlette, Jinja2, uvicorn).
"""

from __future__ import annotations

try:
    import jinja2  # noqa: F401
    import starlette  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        f"the pikku-mongo dashboard needs the ui extra ({exc.name} is missing): "
        "pip install 'pikku-mongo[ui]'"
    ) from exc

from pikku_mongo.dashboard.app import dashboard_app
from pikku_mongo.dashboard.links import NAV, NavItem
from pikku_mongo.dashboard.security import AuthCallable

__all__ = ["NAV", "AuthCallable", "NavItem", "dashboard_app"]
