"""Fixtures for the dashboard's tests: seeded runs, the app and an ASGI client."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from engine_core import Engine
from pikku_mongo.dashboard import dashboard_app
from tests.support.dashboard_runs import seed_runs

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
