"""Fixtures for the fault tests: a wire server of the test's own (it gets killed and
frozen), worker processes, a client engine, and in-process engines behind a proxy."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from engine_core import Engine
from pikku_mongo import MongoStore
from tests.conftest import with_database
from tests.faults.workload import register
from tests.support.execution_log import LOG_PATH
from tests.support.fleet import Fleet, client_engine, fleet_of
from tests.support.proxy import FaultProxy
from tests.support.servers import Server, start_nx

#: Short leases so that takeovers happen within the test's time; the skew bound is
#: exercised (not 0), small enough for a 2 s lease.
LEASE_TTL = "2s"
RECOVERY_INTERVAL = "1s"
MAX_CLOCK_SKEW = "250ms"


@pytest.fixture
def fault_server(tmp_path: Path) -> Iterator[Server]:
    """An nx-27017 of this test's own (the session's is shared, so never killed)."""
    if os.environ.get("MONGODB_URI"):
        pytest.skip("the fault tests kill and freeze their own nx-27017 server")
    server = start_nx(tmp_path / "server")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def fault_uri(fault_server: Server) -> str:
    return with_database(fault_server.uri, f"f_{uuid.uuid4().hex[:10]}")


@pytest.fixture
def fleet(fault_uri: str, tmp_path: Path) -> Iterator[Fleet]:
    with fleet_of("tests.faults.worker", fault_uri, tmp_path) as made:
        yield made


def _workflows(engine: Engine) -> None:
    register(engine, functions=False)


@pytest.fixture
async def client(fault_uri: str) -> AsyncIterator[Engine]:
    """A client-mode engine (starts runs, reads them, runs nothing), direct to the server."""
    async with client_engine(
        fault_uri, _workflows, lease_ttl=LEASE_TTL, max_clock_skew=MAX_CLOCK_SKEW
    ) as engine:
        yield engine


@pytest.fixture
async def proxy(nx_uri: str) -> AsyncIterator[FaultProxy]:
    """A proxy in this test's event loop, in front of the session's nx-27017."""
    hosts = nx_uri.split("://", 1)[1].split("/", 1)[0]
    host, _, port = hosts.rpartition(":")
    async with FaultProxy(host, int(port), seed=7) as made:
        yield made


@pytest.fixture
def exec_log(tmp_path: Path) -> Iterator[Path]:
    """The side-effect log of the steps this process runs."""
    path = tmp_path / "in-process.jsonl"
    previous = LOG_PATH["path"]
    LOG_PATH["path"] = str(path)
    try:
        yield path
    finally:
        LOG_PATH["path"] = previous


@pytest.fixture
async def proxied(proxy: FaultProxy, exec_log: Path) -> AsyncIterator[Engine]:
    """An engine in this process whose every command goes through ``proxy``."""
    store = MongoStore.from_uri(
        proxy.uri(f"p_{uuid.uuid4().hex[:10]}"), max_clock_skew=MAX_CLOCK_SKEW
    )
    await store.init()
    engine = Engine(store, lease_ttl=LEASE_TTL, recovery_interval=RECOVERY_INTERVAL,
                    undispatched_after=LEASE_TTL)  # fmt: skip
    register(engine)
    try:
        yield engine
    finally:
        with contextlib.suppress(Exception):
            await store.close()
