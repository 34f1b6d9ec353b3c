"""Reads that decide something are causally consistent (docs/guides/durability.md): after a
failover a ``majority`` read could be served from a snapshot without this process's own
acknowledged write; a causally consistent session makes the read carry
``readConcern.afterClusterTime``, and the server waits until its snapshot holds it.

Neither test server returns ``operationTime`` or ``$clusterTime``, so a proxy in front of
a real nx-27017 (and mongoeco) stamps them on every reply, as a replica set member does
(``FaultProxy.stamp_times``); the requests it forwards are what the assertions read. Both
servers accept a ``readConcern`` with ``afterClusterTime`` (nothing is stripped). Without
an operation time (the servers as they are: the conformance suite) reads are plain."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from bson import Timestamp
from pymongo import AsyncMongoClient, monitoring

from engine_core import DuplicateRunError, Engine, WorkflowContext
from engine_core.testing.builders import make_job, make_run
from pikku_mongo import MongoStore
from pikku_mongo.wire.causal import OperationClock
from tests.conftest import mongo_store
from tests.support.proxy import Exchange, FaultProxy


@pytest.fixture(params=["nx_uri", "mongoeco_uri"])
async def stamping(request: pytest.FixtureRequest) -> AsyncIterator[FaultProxy]:
    """A proxy in front of a test server that gives its replies a replica set's clock."""
    uri: str = request.getfixturevalue(request.param)
    hosts = uri.split("://", 1)[1].split("/", 1)[0]
    host, _, port = hosts.rpartition(":")
    async with FaultProxy(host, int(port)) as proxy:
        proxy.stamp_times = True
        yield proxy


def after(exchange: Exchange) -> Timestamp | None:
    """The ``afterClusterTime`` a request carried."""
    found = exchange.command.get("readConcern", {}).get("afterClusterTime")
    assert found is None or isinstance(found, Timestamp)
    return found


def on(proxy: FaultProxy, name: str, collection: str, since: int = 0) -> list[Exchange]:
    return [x for x in proxy.exchanges[since:] if x.name == name and x.command[name] == collection]


def commands(exchanges: list[Exchange]) -> list[Exchange]:
    """The commands among ``exchanges``: not a connection's handshake nor the driver's
    heartbeat (``hello``), which the driver shows to no command listener and sends at
    moments of its own (a heartbeat every 10 s, a handshake when the pool grows)."""
    return [x for x in exchanges if x.name.lower() not in {"hello", "ismaster"}]


def newest_before(proxy: FaultProxy, exchange: Exchange) -> Timestamp:
    """The newest operation time in the replies to commands before ``exchange``."""
    earlier = commands(proxy.exchanges[: proxy.exchanges.index(exchange)])
    return max(x.operation_time for x in earlier if x.operation_time is not None)


async def test_deciding_reads_wait_for_this_process_s_last_write(stamping: FaultProxy) -> None:
    store: MongoStore = await mongo_store(stamping.uri())
    stamping.record = True
    await store.insert_run(make_run("r", status="queued", queue="q", dedup_id="d"))
    (insert,) = on(stamping, "insert", "pikku_runs")
    assert insert.operation_time is not None
    mark = len(stamping.exchanges)

    assert await store.get_run("r") is not None  # what a pass and its controls decide by
    assert await store.load_steps("r") == []  # what a replay decides by
    with pytest.raises(DuplicateRunError):  # the dedup claim's reads
        await store.insert_run(make_run("r2", status="queued", queue="q", dedup_id="d"))
    (run_read,) = on(stamping, "find", "pikku_runs", mark)[:1]
    (steps_read,) = on(stamping, "find", "pikku_steps", mark)
    claim_read = on(stamping, "find", "pikku_dedup", mark)[0]
    for read in (run_read, steps_read, claim_read):
        seen = after(read)
        assert seen is not None and seen >= insert.operation_time
        assert seen == newest_before(stamping, read)
        assert "$clusterTime" in read.command and "lsid" in read.command
    # A session costs no command of its own: only the reads went out.
    assert {x.name for x in commands(stamping.exchanges[mark:])} <= {"find", "insert"}

    # A listing decides nothing: a plain majority read.
    mark = len(stamping.exchanges)
    await store.list_runs(workflow=None, status=None, limit=10, after=None)
    (listing,) = commands(stamping.exchanges[mark:])
    assert listing.name == "find" and after(listing) is None
    assert listing.command["readConcern"] == {"level": "majority"}
    await store.close()


async def test_a_resent_write_confirms_its_first_try_causally(stamping: FaultProxy) -> None:
    store: MongoStore = await mongo_store(stamping.uri())
    stamping.record = True
    await store.insert_run(make_run("r"))
    # The insert lands and its reply is lost (one server: the driver does not retry
    # writes): the store's own retry first reads whether its first try landed.
    lost = stamping.drop_reply("insert", where={"insert": "pikku_steps"})
    assert await store.insert_step(make_job("r", "job")) is True
    assert len(lost.hits) == 1
    confirms = [x for x in on(stamping, "find", "pikku_steps") if "ins" in x.command["filter"]]
    assert confirms, "the re-sent insert did not confirm its first try"
    seen = after(confirms[0])
    assert seen is not None and seen == newest_before(stamping, confirms[0])
    await store.close()


class Commands(monitoring.CommandListener):
    def __init__(self) -> None:
        self.started_events: list[monitoring.CommandStartedEvent] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.started_events.append(event)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


async def noop() -> None:
    return None


@pytest.mark.parametrize("stamped", [True, False])
async def test_a_workflow_costs_the_same_commands_with_or_without_a_clock(
    stamping: FaultProxy, stamped: bool
) -> None:
    """N + 4 commands for N inline steps either way; the result's read is causal only
    when the server keeps a clock. (A run that ends in this process wakes its waiter
    with no read: its result is asked again once it ended, which reads it.)"""
    stamping.stamp_times = stamped
    store: MongoStore = await mongo_store(stamping.uri())
    engine = Engine(store)

    @engine.workflow("noops")
    async def noops(ctx: WorkflowContext, data: Any) -> int:
        for i in range(5):
            await ctx.step(f"s{i}", noop)
        return 5

    async with engine:
        stamping.record = True
        await engine.start("noops", run_id="causal-run")
        assert await engine.result("causal-run", timeout=30) == 5
        assert await engine.result("causal-run", timeout=30) == 5
        stamping.record = False
    named = [x for x in stamping.exchanges if "causal-run" in repr(x.command)]
    assert len(named) <= 5 + 4, [x.name for x in named]
    reads = [x for x in named if x.name == "find"]
    assert reads and all((after(x) is not None) == stamped for x in reads)
    await store.close()


async def test_without_an_operation_time_reads_are_plain(nx_uri: str) -> None:
    """The test servers as they are: no session, no ``afterClusterTime``."""
    listener = Commands()
    store: MongoStore = await mongo_store(nx_uri, event_listeners=[listener])
    await store.insert_run(make_run("r"))
    listener.started_events.clear()
    assert await store.get_run("r") is not None
    (read,) = listener.started_events
    assert read.command["readConcern"] == {"level": "majority"}
    assert "$clusterTime" not in read.command
    await store.close()


@pytest.mark.parametrize("with_clock", [True, False])
async def test_a_client_of_your_own_reads_causally_with_the_listener(
    stamping: FaultProxy, with_clock: bool
) -> None:
    listeners = [OperationClock()] if with_clock else []
    client: AsyncMongoClient[Any] = AsyncMongoClient(stamping.uri(), event_listeners=listeners)
    store = MongoStore(client.get_database(f"t_{uuid.uuid4().hex[:12]}"), max_clock_skew=0)
    stamping.record = True
    await store.insert_run(make_run("r"))
    mark = len(stamping.exchanges)
    assert await store.get_run("r") is not None
    (read,) = on(stamping, "find", "pikku_runs", mark)
    assert (after(read) is not None) == with_clock
    await client.drop_database(store.database.name)
    await client.close()
