"""MongoStore's write and read concerns: durable defaults, overrides, and what the wire
servers do with them (both accept them; the conformance suite runs with the defaults)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient, WriteConcern, monitoring
from pymongo.read_concern import ReadConcern

from engine_core import Engine, WorkflowContext
from pikku_mongo import MongoStore
from pikku_mongo.store.options import DEFAULT_READ_CONCERN, DEFAULT_WRITE_CONCERN
from tests.conftest import mongo_store, with_database


class Recorder(monitoring.CommandListener):
    def __init__(self) -> None:
        self.commands: list[tuple[str, dict[str, Any]]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.commands.append((event.command_name, dict(event.command)))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.fixture(params=["nx", "mongoeco"])
def server_uri(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{request.param}_uri"))


def test_the_defaults_are_majority_journaled_with_a_time_limit() -> None:
    assert DEFAULT_WRITE_CONCERN.document == {"w": "majority", "j": True, "wtimeout": 10_000}
    assert DEFAULT_READ_CONCERN.level == "majority"
    client: AsyncMongoClient[Any] = AsyncMongoClient("mongodb://127.0.0.1:1/", connect=False)
    store = MongoStore(client.get_database("x"))
    for collection in (store.runs, store.steps, store.events, store.leases):
        assert collection.write_concern == DEFAULT_WRITE_CONCERN
        assert collection.read_concern == DEFAULT_READ_CONCERN
    assert store.write_concern == DEFAULT_WRITE_CONCERN
    assert store.read_concern == DEFAULT_READ_CONCERN


def test_a_client_with_w1_does_not_weaken_the_store() -> None:
    client: AsyncMongoClient[Any] = AsyncMongoClient(
        "mongodb://127.0.0.1:1/?w=1&readConcernLevel=local", connect=False
    )
    store = MongoStore(client.get_database("x"))
    assert store.steps.write_concern == DEFAULT_WRITE_CONCERN
    assert store.steps.read_concern == DEFAULT_READ_CONCERN


def test_overrides_and_a_read_concern_that_follows_the_write_concern() -> None:
    client: AsyncMongoClient[Any] = AsyncMongoClient("mongodb://127.0.0.1:1/", connect=False)
    db = client.get_database("x")
    fast = MongoStore(db, write_concern=WriteConcern(w=1))
    assert fast.runs.write_concern.document == {"w": 1}
    # Majority reads after w=1 writes could miss the store's own writes: local instead.
    assert fast.runs.read_concern.level == "local"
    chosen = MongoStore(db, write_concern=WriteConcern(w=1), read_concern=ReadConcern("majority"))
    assert chosen.events.read_concern.level == "majority"
    only_reads = MongoStore(db, read_concern=ReadConcern("local"))
    assert only_reads.leases.write_concern == DEFAULT_WRITE_CONCERN
    assert only_reads.leases.read_concern.level == "local"
    with pytest.raises(TypeError, match="WriteConcern"):
        MongoStore(db, write_concern={"w": 1})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ReadConcern"):
        MongoStore(db, read_concern="majority")  # type: ignore[arg-type]


async def test_from_uri_takes_the_same_options(nx_uri: str) -> None:
    uri = with_database(nx_uri, f"wc_{uuid.uuid4().hex[:8]}")
    store = MongoStore.from_uri(
        uri, write_concern=WriteConcern(w=1, j=False), read_concern=ReadConcern("local")
    )
    try:
        assert store.runs.write_concern.document == {"w": 1, "j": False}
        assert store.runs.read_concern.level == "local"
    finally:
        await store.close()
    with pytest.raises(TypeError, match="WriteConcern"):
        MongoStore.from_uri(uri, write_concern="majority")  # type: ignore[arg-type]


@pytest.fixture
async def recorded(server_uri: str) -> AsyncIterator[tuple[MongoStore, Recorder]]:
    recorder = Recorder()
    store = await mongo_store(server_uri, event_listeners=[recorder])
    try:
        yield store, recorder
    finally:
        await store.close()


async def test_every_command_carries_the_concerns_and_both_servers_accept_them(
    recorded: tuple[MongoStore, Recorder],
) -> None:
    store, recorder = recorded
    engine = Engine(store, lease_ttl="5s")

    async def child(ctx: WorkflowContext, data: Any) -> int:
        return int(await ctx.step("one", lambda: 1))

    async def parent(ctx: WorkflowContext, data: Any) -> int:
        await ctx.sleep("nap", 0.05)
        got = await ctx.wait_for_event("go", timeout=10)
        return int(await ctx.child("kid", "child", None)) + int(got)

    engine.workflow("child")(child)
    engine.workflow("parent")(parent)
    async with engine:
        run_id = await engine.start("parent")
        await engine.send_event(run_id, "go", 41)
        assert await engine.result(run_id, timeout=30) == 42
    writes = {"insert", "update", "findAndModify", "delete"}
    reads = {"find", "aggregate"}
    seen = {name for name, _ in recorder.commands}
    assert {"insert", "update", "findAndModify", "find"} <= seen
    for name, command in recorder.commands:
        if name in writes:
            assert command["writeConcern"] == {"w": "majority", "j": True, "wtimeout": 10_000}
        if name in reads:
            assert command["readConcern"] == {"level": "majority"}


async def test_weaker_concerns_on_the_wire(nx_uri: str) -> None:
    recorder = Recorder()
    store = await mongo_store(nx_uri, write_concern=WriteConcern(w=1), event_listeners=[recorder])
    try:
        engine = Engine(store)

        @engine.workflow("w")
        async def w(ctx: WorkflowContext, data: Any) -> Any:
            return await ctx.step("s", lambda: "done")

        async with engine:
            assert await engine.result(await engine.start("w"), timeout=30) == "done"
    finally:
        await store.close()
    for name, command in recorder.commands:
        if name in ("insert", "update", "findAndModify"):
            assert command["writeConcern"] == {"w": 1}
        if name == "find":
            assert command["readConcern"] == {"level": "local"}
