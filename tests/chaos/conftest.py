"""Fixtures for the chaos tests: real worker processes on the MongoDB test server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from engine_core import Engine
from tests.chaos.worker import register
from tests.conftest import with_database
from tests.support.fleet import Fleet, client_engine, fleet_of


@pytest.fixture
def chaos_uri(nx_uri: str) -> str:
    return with_database(nx_uri, f"chaos_{uuid.uuid4().hex[:12]}")


@pytest.fixture
def fleet(chaos_uri: str, tmp_path: Path) -> Iterator[Fleet]:
    with fleet_of("tests.chaos.worker", chaos_uri, tmp_path) as made:
        yield made


def _workflows(engine: Engine) -> None:
    register(engine, functions=False, workflows=True)


@pytest.fixture
async def client(chaos_uri: str) -> AsyncIterator[Engine]:
    """An engine in client mode on the chaos database: it starts runs, runs nothing."""
    async with client_engine(chaos_uri, _workflows, lease_ttl="1s") as engine:
        yield engine
