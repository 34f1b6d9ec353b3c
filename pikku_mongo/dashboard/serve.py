"""``pikku-mongo ui``: serve the dashboard over a MongoStore with uvicorn.

The engine is a client (it runs no step and registers no workflow); the workflow filter
offers the names read from the store.
"""

from __future__ import annotations

import logging
import socket
import sys

import uvicorn

from engine_core import Engine
from pikku_mongo.dashboard.app import dashboard_app
from pikku_mongo.dashboard.security import is_loopback
from pikku_mongo.store.mongo_store import MongoStore
from pikku_mongo.wire.server import ensure_reachable
from pikku_mongo.wire.uri import redact

#: How long the first command may wait for the server before ``ui`` gives up.
CONNECT_TIMEOUT_MS = 5_000
#: How long a page's store calls wait out an outage before the page says the database
#: cannot be reached (a 503): within the CLI's rule of an answer in 10 s.
STORE_TIMEOUT = "8s"


class RefusedToServe(Exception):
    """``pikku-mongo ui`` will not start as asked; the message says why."""


def check_bind(host: str, token: str | None) -> None:
    """Refuse to listen beyond this machine without a token (or with a short one)."""
    if token is not None and len(token) < 8:
        raise RefusedToServe("the token must be at least 8 characters long")
    if not is_loopback(host) and token is None:
        raise RefusedToServe(
            f"refusing to serve the dashboard on {host} without a token: anyone who can "
            "reach it could cancel runs; pass --token (or set PIKKU_MONGO_UI_TOKEN), or "
            "keep the default --host 127.0.0.1"
        )


def bind(host: str, port: int) -> socket.socket:
    """A listening-ready TCP socket bound to ``host:port`` (IPv4 or IPv6)."""
    if not 0 <= port <= 65535:
        raise RefusedToServe(f"port {port} is not a TCP port (0 to 65535)")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise RefusedToServe(f"cannot listen on {host!r}: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise RefusedToServe(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.set_inheritable(True)
    return sock


async def serve(
    uri: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8642,
    token: str | None = None,
    read_only: bool = False,
    trace_url: str | None = None,
    refresh_seconds: float = 5.0,
    metrics: bool = False,
) -> None:
    """Serve the dashboard of the store at ``uri`` until interrupted."""
    check_bind(host, token)
    logging.basicConfig(level=logging.WARNING, format="pikku-mongo ui: %(name)s: %(message)s")
    store = MongoStore.from_uri(uri, serverSelectionTimeoutMS=CONNECT_TIMEOUT_MS)
    try:
        engine = Engine(store, store_timeout=STORE_TIMEOUT)
        app = dashboard_app(
            engine,
            token=token,
            read_only=read_only,
            trace_url=trace_url,
            refresh_seconds=refresh_seconds,
            metrics=metrics,
        )
        # One ping first: an unreachable server fails here, once, within the timeout.
        await ensure_reachable(store.database, redact(uri), CONNECT_TIMEOUT_MS / 1000 + 1)
        workflows = await engine.list_workflows()
        sock = bind(host, port)
        config = uvicorn.Config(
            app, log_level="warning", lifespan="off", server_header=False, proxy_headers=False
        )
        server = uvicorn.Server(config)
        shown = f"[{host}]" if ":" in host else host
        bound_port = sock.getsockname()[1]
        print(
            f"pikku-mongo ui: serving http://{shown}:{bound_port}/ "
            f"({len(workflows)} workflow(s) in the store"
            f"{', read-only' if read_only else ''}{', token required' if token else ''}); "
            "Ctrl-C to stop",
            file=sys.stderr,
            flush=True,
        )
        await server.serve(sockets=[sock])
    finally:
        await store.close()
