"""Shared fixtures: the stores every engine test runs on, and the wire test servers.

``MONGODB_URI`` set: MongoDB tests use that server and nothing is started. Otherwise an
nx-27017 server is started for the session (always with ``--data-dir``), and the
conformance and race tests also run on a mongoeco wire server (Python 3.13 venv).
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, cast

import pytest

from engine_core import Engine
from engine_core.memory import InMemoryStore
from engine_core.store import Store
from tests.support import servers as test_servers


def with_database(uri: str, database: str) -> str:
    """``uri`` pointing at ``database`` (replacing any database path it had)."""
    scheme, rest = uri.split("://", 1)
    hosts, _, tail = rest.partition("/")
    _, _, query = tail.partition("?")
    return f"{scheme}://{hosts}/{database}" + (f"?{query}" if query else "")


@pytest.fixture(scope="session")
def nx_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The primary MongoDB test server: ``MONGODB_URI``, or nx-27017 started here."""
    if os.environ.get("MONGODB_URI"):
        yield os.environ["MONGODB_URI"]
        return
    server = test_servers.start_nx(tmp_path_factory.mktemp("nx"))
    try:
        yield server.uri
    finally:
        server.stop()


@pytest.fixture(scope="session")
def mongoeco_uri() -> Iterator[str]:
    """The second, independent wire server; skipped with the reason when unavailable."""
    if os.environ.get("MONGODB_URI"):
        pytest.skip("MONGODB_URI is set: the suite runs against that server only")
    python313 = test_servers.find_python313()
    if python313 is None:
        pytest.skip("no Python 3.13 found: mongoeco's wire server needs it")
    server = test_servers.start_mongoeco()
    if server is None:
        pytest.skip("mongoeco's wire server could not be set up (see output above)")
    try:
        yield server.uri
    finally:
        server.stop()


#: The databases :func:`mongo_store` made during the running test (dropped after it).
_made: list[tuple[str, str]] = []


async def mongo_store(uri: str, **options: Any) -> Any:
    """A MongoStore on a fresh database, with the default (durable) concerns, dropped
    when the test ends. Every test process runs on this one host, so no clock skew
    (``max_clock_skew=0``): tests of the margin itself pass their own; the conformance
    suite's leases last 50 ms."""
    from pikku_mongo import MongoStore

    options.setdefault("max_clock_skew", 0)
    name = f"t_{uuid.uuid4().hex[:12]}"
    _made.append((uri, name))
    store = MongoStore.from_uri(with_database(uri, name), **options)
    await store.init()
    return store


def _listening(uri: str) -> bool:
    """Whether a host of ``uri`` accepts a connection now: a test may have stopped its
    server, or the proxy in front of it, and the driver would wait out a whole server
    selection to find that out."""
    if not uri.startswith("mongodb://"):
        return True  # mongodb+srv: the hosts are in DNS
    hosts = uri.split("://", 1)[1].split("/", 1)[0].rpartition("@")[2]
    for host in hosts.split(","):
        name, colon, port = host.rpartition(":")
        try:
            address = (name.strip("[]"), int(port)) if colon else (host, 27017)
            socket.create_connection(address, timeout=1).close()
        except (OSError, ValueError):
            continue
        return True
    return False


@pytest.fixture(autouse=True)
def _drop_test_databases() -> Iterator[None]:
    """Drop the databases the test made: a server keeps state for each database that
    had a change stream (nx-27017 holds at most 100 such open, and then closes the
    newest), so a suite of a thousand tests must not leave them behind."""
    yield
    if not _made:
        return
    from pymongo import MongoClient

    made, _made[:] = list(_made), []
    for uri in sorted({u for u, _ in made}):
        if not _listening(uri):
            continue  # stopped by the test: nothing left to drop
        client: MongoClient[Any] = MongoClient(uri, serverSelectionTimeoutMS=2000)
        try:
            for name in (n for u, n in made if u == uri):
                client.drop_database(name)
        except Exception:  # the test stopped its server, say: nothing left to drop
            pass
        finally:
            client.close()


StoreFactory = Callable[[], Any]


async def open_store(request: pytest.FixtureRequest) -> Store:
    """The store ``request.param`` names: "memory", "mongo" (on nx-27017) or
    "mongo-targeted" (the same with targeted polling forced on, as on a sharded
    cluster)."""
    if request.param == "memory":
        made: Store = InMemoryStore()
        await made.init()
        return made
    targeted = request.param == "mongo-targeted"
    return cast(
        Store,
        await mongo_store(request.getfixturevalue("nx_uri"), targeted_polling=targeted or None),
    )


@pytest.fixture(params=["memory", "mongo"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """Every engine test runs on the in-memory store and on MongoStore."""
    made = await open_store(request)
    yield made
    await made.close()


@pytest.fixture
def make_engine(store: Store) -> Callable[..., Engine]:
    """Engines on the test's store; several may share it (one client, one worker...)."""

    def make(**options: Any) -> Engine:
        options.setdefault("lease_ttl", "5s")
        return Engine(store, **options)

    return make


@pytest.fixture
def engine(make_engine: Callable[..., Engine]) -> Engine:
    return make_engine()
