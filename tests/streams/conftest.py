"""Fixtures for the stream tests with real worker processes on nx-27017."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from engine_core import Engine
from tests.conftest import with_database
from tests.streams.worker import register
from tests.support.fleet import Fleet, client_engine, fleet_of


@pytest.fixture
def streams_uri(nx_uri: str) -> str:
    return with_database(nx_uri, f"streams_{uuid.uuid4().hex[:12]}")


@pytest.fixture
def fleet(streams_uri: str, tmp_path: Path) -> Iterator[Fleet]:
    with fleet_of("tests.streams.worker", streams_uri, tmp_path) as made:
        yield made


@pytest.fixture
async def client(streams_uri: str) -> AsyncIterator[Engine]:
    """An engine in client mode (another process than the workers): it starts runs and
    reads their streams, runs nothing."""
    async with client_engine(streams_uri, register, lease_ttl="1s") as engine:
        yield engine
