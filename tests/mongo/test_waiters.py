"""Waiting for many runs costs O(runs) reads in all, not a read per waiter per settle."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from pymongo import monitoring

from engine_core import Engine, WorkflowContext
from pikku_mongo import MongoStore
from tests.conftest import with_database

RUNS = 500


class RunReads(monitoring.CommandListener):
    """Reads of the runs collection: commands, and documents they returned."""

    def __init__(self) -> None:
        self.commands = 0
        self.documents = 0
        self._ours: set[int] = set()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name in ("find", "getMore") and str(
            event.command.get(event.command_name, "")
        ).endswith("runs"):
            self.commands += 1
            self._ours.add(event.request_id)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        if event.request_id in self._ours:
            cursor = event.reply.get("cursor", {})
            self.documents += len(cursor.get("firstBatch", cursor.get("nextBatch", [])))

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def _register(engine: Engine) -> None:
    @engine.workflow("two")
    async def two(ctx: WorkflowContext, data: Any) -> int:
        await ctx.step("a", lambda: None)
        await asyncio.sleep(0.01 * (data % 7))  # end at different moments
        await ctx.step("b", lambda: None)
        return int(data)


@pytest.mark.parametrize("where", ["here", "elsewhere"])
async def test_500_waiters_cost_o_runs_reads(nx_uri: str, where: str) -> None:
    uri = with_database(nx_uri, f"wait_{uuid.uuid4().hex[:10]}")
    reads = RunReads()
    waiting = MongoStore.from_uri(uri, event_listeners=[reads])
    worker_store = MongoStore.from_uri(uri) if where == "elsewhere" else waiting
    await waiting.init()
    runner = Engine(worker_store, concurrency=32)
    _register(runner)
    # "here": this engine runs the runs and awaits them; "elsewhere": a client engine
    # (another process, as far as it knows) awaits runs that another engine drives.
    waiter = runner if where == "here" else Engine(waiting)
    if waiter is not runner:
        _register(waiter)
    async with runner:
        run_ids = await asyncio.gather(*(waiter.start("two", i) for i in range(RUNS)))
        before = (reads.commands, reads.documents)
        results = await asyncio.gather(*(waiter.result(r, timeout=120) for r in run_ids))
        commands, documents = reads.commands - before[0], reads.documents - before[1]
    assert results == list(range(RUNS))
    print(f"{where}: {commands} reads of runs returned {documents} documents")
    # One read per waiter per settle would be RUNS * RUNS documents (and as many reads);
    # here each run is read about once, by queries shared by every waiter.
    assert documents <= 3 * RUNS
    assert commands < RUNS / 2
    await waiting.database.client.drop_database(waiting.database.name)
    await waiting.close()
    if worker_store is not waiting:
        await worker_store.close()
