"""A run of N dispatched steps, each finished by a worker in another engine: its passes
read O(N) step documents in all (each pass reads what changed since the last), not
O(N**2) (a full replay per dispatch)."""

from __future__ import annotations

import uuid
from typing import Any

from pymongo import monitoring

from engine_core import Engine, WorkflowContext
from pikku_mongo import MongoStore
from tests.conftest import with_database
from tests.support.shard_key_check import ShardKeyListener

N = 40


class StepReads(monitoring.CommandListener):
    def __init__(self) -> None:
        self.documents = 0
        self._ours: set[int] = set()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        name = event.command_name
        if name in ("find", "getMore") and str(event.command.get(name, "")).endswith("steps"):
            self._ours.add(event.request_id)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        if event.request_id in self._ours:
            cursor = event.reply.get("cursor", {})
            self.documents += len(cursor.get("firstBatch", cursor.get("nextBatch", [])))

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


async def test_n_remote_dispatches_read_o_n_step_documents(nx_uri: str) -> None:
    uri = with_database(nx_uri, f"dr_{uuid.uuid4().hex[:10]}")
    reads = StepReads()
    shard_keys = ShardKeyListener()  # claims and job writes of a real fleet carry theirs
    orchestrator_store = MongoStore.from_uri(uri, event_listeners=[reads, shard_keys])
    worker_store = MongoStore.from_uri(uri, event_listeners=[shard_keys])
    orchestrator = Engine(orchestrator_store)  # runs the workflow, not the step function
    worker = Engine(worker_store)  # runs the step function only

    @orchestrator.workflow("chain")
    async def chain(ctx: WorkflowContext, data: Any) -> int:
        total = 0
        for i in range(N):
            total += await ctx.dispatch(f"d{i}", "inc", i)
        return total

    @worker.step_function("inc")
    async def inc(n: int) -> int:
        return n + 1

    async with worker, orchestrator:
        run_id = await orchestrator.start("chain")
        before = reads.documents
        assert await orchestrator.result(run_id, timeout=120) == sum(range(1, N + 1))
        read = reads.documents - before
    print(f"{N} dispatches: {read} step documents read")
    assert read <= 3 * N  # a full replay per dispatch would read about N * N / 2
    assert shard_keys.checked > 0 and shard_keys.violations == []
    await orchestrator_store.database.client.drop_database(orchestrator_store.database.name)
    await orchestrator_store.close()
    await worker_store.close()
