"""Fixtures for the dashboard's tests: seeded runs, the app and an ASGI client."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from engine_core import Engine
from pikku_mongo.dashboard import dashboard_app
from tests.support.dashboard_runs import seed_runs
from tests.support.servers import free_port

BASE = "http://127.0.0.1"


@pytest.fixture
async def seeded(engine: Engine) -> dict[str, str]:
    """Runs in every status on the test's store (memory and MongoStore on nx-27017)."""
    return await seed_runs(engine)


def client_for(app: Any, **options: Any) -> httpx.AsyncClient:
    options.setdefault("base_url", BASE)
    transport = httpx.ASGITransport(app=app, client=options.pop("client", ("127.0.0.1", 5000)))
    return httpx.AsyncClient(transport=transport, **options)


@pytest.fixture
async def client(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(dashboard_app(engine)) as made:
        yield made


def csrf_of(html: str) -> str:
    """The CSRF token a page carries."""
    found = re.search(r'<meta name="csrf-token" content="([0-9a-f]{64})">', html)
    assert found, "the page has no CSRF token"
    return found.group(1)


async def csrf(client: httpx.AsyncClient, path: str = "/runs") -> str:
    """Load a page (which sets the CSRF cookie) and return its token."""
    page = await client.get(path)
    assert page.status_code in (200, 401), page.text
    return csrf_of(page.text)


@contextlib.contextmanager
def ui_server(uri: str, *args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """``pikku-mongo ui`` on a free loopback port against ``uri``; yields its base URL
    once it answers, and stops it afterwards."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pikku_mongo.cli", "ui", "--port", str(port), *args],
        env={**os.environ, "MONGODB_URI": uri, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                assert proc.stderr is not None
                raise AssertionError(f"pikku-mongo ui exited: {proc.stderr.read()}")
            try:
                httpx.get(f"{base}/static/dashboard.css", timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
