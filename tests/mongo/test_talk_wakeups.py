"""A caller of ``engine.get_value`` or ``engine.update`` waits on MongoDB without
polling (issue 42): the change stream its engine holds wakes it when the value lands or
the answer is written, so a long wait costs a few reads (a first look, a look at the run
every second, the look once woken), where a server without change streams (mongoeco)
has it poll with a backoff."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from pymongo import monitoring

from engine_core import Engine, WorkflowContext
from engine_core.fleet.talk_waiters import CHECK_S
from pikku_mongo import MongoStore
from tests.conftest import mongo_store, with_database
from tests.support.sent_commands import SentCommands

WAIT_S = 2.5


class Looks(monitoring.CommandListener):
    """Reads of the values and updates collections, by collection."""

    def __init__(self) -> None:
        self.reads = {"values": 0, "updates": 0}

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name not in ("find", "aggregate", "findAndModify"):
            return
        collection = str(event.command.get(event.command_name, ""))
        for kind in self.reads:
            if collection.endswith(kind):
                self.reads[kind] += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.mark.parametrize("server", ["nx", "mongoeco"])
async def test_a_waiting_caller_is_woken_not_polling(
    server: str, request: pytest.FixtureRequest
) -> None:
    base = request.getfixturevalue("nx_uri" if server == "nx" else "mongoeco_uri")
    store = await mongo_store(base)
    looks = Looks()
    client_store = MongoStore.from_uri(
        with_database(base, store.database.name), max_clock_skew=0, event_listeners=[looks]
    )
    worker = Engine(store, lease_ttl="5s")
    client = Engine(client_store)  # a bare client: no workflow code

    @worker.workflow("late")
    async def late(ctx: WorkflowContext, data: Any) -> None:
        await ctx.wait_for_event("go")
        await ctx.set_value("stage", "packed")
        req = await ctx.wait_for_update("q")
        assert req is not None
        await req.reply("done")

    try:
        async with worker:
            run_id = await worker.start("late")
            began = time.monotonic()
            value = asyncio.create_task(client.get_value(run_id, "stage", timeout=60))
            answer = asyncio.create_task(client.update(run_id, "q", 1, timeout=60))
            await asyncio.sleep(WAIT_S)
            assert not value.done() and not answer.done()
            await worker.send_event(run_id, "go")
            assert await asyncio.wait_for(value, 30) == "packed"
            assert await asyncio.wait_for(answer, 30) == "done"
            waited = time.monotonic() - began
    finally:
        await client_store.close()
        await store.close()
    print(f"{server}: {looks.reads} in {waited:.2f} s")
    # Woken: a first look, one a second (CHECK_S) while it waits, those once woken; a machine
    # under load waits longer, so the bound grows with the wait.
    woken_bound = 4 + waited / CHECK_S
    for kind, reads in looks.reads.items():
        if server == "nx":
            assert reads <= woken_bound, (kind, reads, waited)
        else:  # no change stream: the backoff's looks (5 ms doubling to 0.5 s)
            assert reads > woken_bound, (kind, reads, waited)


async def test_an_idle_worker_reads_its_update_stream_a_few_times_a_second(nx_uri: str) -> None:
    # nx-27017 answers a change stream's getMore at once: a worker reading the stream of
    # updates at the pace of a waiting caller's would send a hundred commands a second
    # for as long as it lives, for wake-ups its own poll would bring a little later.
    commands = SentCommands()
    store = await mongo_store(nx_uri, event_listeners=[commands])
    engine = Engine(store, lease_ttl="5s")

    @engine.workflow("idle")
    async def idle(ctx: WorkflowContext, data: Any) -> None:
        return None

    async with engine:
        await asyncio.sleep(0.5)  # the streams are open
        commands.sent.clear()
        began = time.monotonic()
        await asyncio.sleep(2.0)
        took = time.monotonic() - began
    # Fewer, never more, on a loaded machine: the bound counts what it may send.
    assert commands.count("getMore") <= 8 * took, commands.sent
    await store.close()
