"""The fault-injection harness itself: the wire proxy and the server controls, against
the real wire servers."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.errors import ConnectionFailure

from tests.support.proxy import FaultProxy, ProxyProcess, matches
from tests.support.servers import Server, start_nx

pytestmark = pytest.mark.faults


def host_port(uri: str) -> tuple[str, int]:
    hosts = uri.split("://", 1)[1].split("/", 1)[0]
    host, _, port = hosts.rpartition(":")
    return host, int(port)


@pytest.fixture(params=["nx", "mongoeco"])
async def proxy(request: pytest.FixtureRequest) -> AsyncIterator[FaultProxy]:
    host, port = host_port(request.getfixturevalue(f"{request.param}_uri"))
    async with FaultProxy(host, port, seed=1) as made:
        yield made


@pytest.fixture
async def through(proxy: FaultProxy) -> AsyncIterator[AsyncMongoClient[dict[str, Any]]]:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        # A reset marks the server unknown: the next command waits for it to be seen
        # again, so a short selection timeout keeps a test of 40 resets to seconds.
        proxy.uri(),
        serverSelectionTimeoutMS=1000,
        connectTimeoutMS=1000,
        retryReads=False,
    )
    yield client
    await client.close()


def fresh() -> str:
    return f"h_{uuid.uuid4().hex[:10]}"


async def test_a_dropped_reply_is_an_error_for_a_write_that_landed(
    proxy: FaultProxy, through: AsyncMongoClient[dict[str, Any]]
) -> None:
    col = through[fresh()]["docs"]
    await col.insert_one({"_id": "warm-up"})
    rule = proxy.drop_reply("insert", where={"insert": "docs", "documents.0._id": "lost"})
    with pytest.raises(ConnectionFailure):
        await col.insert_one({"_id": "lost"})
    command = await rule.wait(5)
    assert command["documents"][0]["_id"] == "lost" and rule.remaining == 0
    assert await col.find_one({"_id": "lost"}) == {"_id": "lost"}  # it landed
    await col.insert_one({"_id": "next"})  # one rule, one drop
    assert proxy.stats["dropped"] == 1


async def test_rules_match_by_command_name_and_predicate(
    proxy: FaultProxy, through: AsyncMongoClient[dict[str, Any]]
) -> None:
    col = through[fresh()]["docs"]
    await col.insert_many([{"_id": i, "n": 0} for i in range(3)])
    rule = proxy.drop_reply(
        "findAndModify", where=lambda cmd: cmd.get("query", {}).get("_id") in (1, 2), times=2
    )
    assert await col.find_one_and_update({"_id": 0}, {"$inc": {"n": 1}}) is not None
    for i in (1, 2):
        with pytest.raises(ConnectionFailure):
            await col.find_one_and_update({"_id": i}, {"$inc": {"n": 1}})
    assert [d["n"] async for d in col.find({}).sort("_id")] == [1, 1, 1]
    assert len(rule.hits) == 2 and rule.remaining == 0


def test_where_paths_reach_into_lists_and_nested_documents() -> None:
    command = {"update": "runs", "updates": [{"q": {"_id": "r"}, "u": {"$set": {"s": 1}}}]}
    assert matches(command, {"update": "runs", "updates.0.u.$set.s": 1})
    assert not matches(command, {"updates.1.u": 1})
    assert not matches(command, {"updates.0.u.$set.s": 2})
    assert matches(command, None)


async def test_disabled_forwards_everything_and_enabling_again_restores_the_faults(
    proxy: FaultProxy, through: AsyncMongoClient[dict[str, Any]]
) -> None:
    col = through[fresh()]["docs"]
    proxy.enabled = False
    proxy.reset_rate = 1.0
    rule = proxy.drop_reply("insert")
    for i in range(5):
        await col.insert_one({"_id": i})
    assert rule.remaining == 1
    proxy.reset_rate = 0.0
    proxy.enabled = True
    with pytest.raises(ConnectionFailure):
        await col.insert_one({"_id": 5})
    assert await col.count_documents({}) == 6


async def test_random_resets_break_some_commands_and_not_others(
    proxy: FaultProxy, through: AsyncMongoClient[dict[str, Any]]
) -> None:
    col = through[fresh()]["docs"]
    await col.insert_one({"_id": 1})
    proxy.reset_rate = 0.3
    failed = 0
    for _ in range(40):
        try:
            await col.find_one({"_id": 1})
        except ConnectionFailure:
            failed += 1
    proxy.reset_rate = 0.0
    assert 2 < failed < 30
    assert proxy.stats["resets"] >= failed


async def test_freeze_holds_every_reply_until_it_thaws(
    proxy: FaultProxy, through: AsyncMongoClient[dict[str, Any]]
) -> None:
    col = through[fresh()]["docs"]
    await col.insert_one({"_id": 1})
    proxy.freeze(0.8)
    began = time.monotonic()
    assert await col.find_one({"_id": 1}) == {"_id": 1}
    assert time.monotonic() - began >= 0.7
    proxy.freeze()
    task = asyncio.ensure_future(col.find_one({"_id": 1}))
    await asyncio.sleep(0.3)
    assert not task.done() and proxy.frozen
    proxy.thaw()
    assert await asyncio.wait_for(task, 5) == {"_id": 1}


async def test_a_proxy_process_is_driven_through_its_control_socket(nx_uri: str) -> None:
    host, port = host_port(nx_uri)
    with ProxyProcess.start(host, port) as proxy:
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
            proxy.uri(), serverSelectionTimeoutMS=5000, retryReads=False
        )
        try:
            col = client[fresh()]["docs"]
            await col.insert_one({"_id": 0})
            rule = proxy.drop_reply("update", where={"update": "docs"})
            with pytest.raises(ConnectionFailure):
                await col.update_one({"_id": 0}, {"$set": {"x": 1}})
            assert proxy.rule(rule) == {"ok": True, "hits": 1, "remaining": 0}
            assert await col.find_one({"_id": 0}) == {"_id": 0, "x": 1}
            proxy.set(enabled=False, reset_rate=1.0)
            await col.find_one({"_id": 0})
            proxy.set(enabled=True, reset_rate=0.0)
            proxy.freeze(0.5)
            began = time.monotonic()
            await col.find_one({"_id": 0})
            assert time.monotonic() - began >= 0.4
            assert proxy.stats()["dropped"] == 1
        finally:
            await client.close()


# ---- server controls ------------------------------------------------------------------


async def eventually(read: Any, limit: float = 10.0) -> Any:
    """``read()``, again while it fails on a connection the server dropped (a pool
    finds out one connection at a time)."""
    deadline = time.monotonic() + limit
    while True:
        try:
            return await read()
        except ConnectionFailure:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


@pytest.fixture
def own_nx(tmp_path: Path) -> Any:
    server = start_nx(tmp_path)
    yield server
    server.stop()


async def test_a_killed_server_restarts_on_its_port_with_its_data(own_nx: Server) -> None:
    uri = own_nx.uri
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri, serverSelectionTimeoutMS=1000)
    try:
        await client.kept.docs.insert_one({"_id": "survives"})
        pid = own_nx.pid
        own_nx.kill()
        assert not own_nx.alive()
        with pytest.raises(ConnectionFailure):  # a pooled connection breaks, or no server
            await client.kept.docs.find_one({})
        own_nx.restart()
        assert own_nx.alive() and own_nx.pid != pid and own_nx.uri == uri
        assert own_nx.restarts == 1
        assert await eventually(client.kept.docs.find_one) == {"_id": "survives"}
    finally:
        await client.close()


async def test_a_frozen_server_answers_nothing_until_thawed(own_nx: Server) -> None:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        own_nx.uri, serverSelectionTimeoutMS=1000, socketTimeoutMS=1000, retryReads=False
    )
    try:
        await client.f.docs.insert_one({"_id": 1})
        with own_nx.frozen():
            assert own_nx.is_frozen
            with pytest.raises(ConnectionFailure):
                await client.f.docs.find_one({})
        assert not own_nx.is_frozen
        assert await eventually(client.f.docs.find_one) == {"_id": 1}
        own_nx.freeze()
    finally:
        await client.close()
    own_nx.stop()  # stopping a frozen server thaws it first
    assert not own_nx.alive()
