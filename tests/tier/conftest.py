"""Fixtures for the API-tier tests: pinned worker processes of the shop's fleet on the
MongoDB test server, and the tier's engine (it registers nothing)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from engine_core import Engine
from tests.conftest import with_database
from tests.support.fleet import Fleet, client_engine, fleet_of


@pytest.fixture
def shop_uri(nx_uri: str) -> str:
    return with_database(nx_uri, f"tier_{uuid.uuid4().hex[:12]}")


@pytest.fixture
def fleet(shop_uri: str, tmp_path: Path) -> Iterator[Fleet]:
    with fleet_of("tests.tier.worker", shop_uri, tmp_path) as made:
        yield made


@pytest.fixture
async def tier(shop_uri: str) -> AsyncIterator[Engine]:
    """The API tier's engine: no workflow code, no declarations; a client."""
    async with client_engine(shop_uri, lambda engine: None, lease_ttl="2s") as engine:
        yield engine
