"""Round-trip budget: a workflow of N inline no-op steps costs at most N + 4 MongoDB
commands from ``start`` to its ``result`` on the process that runs it, counted by a
command listener (the commands that name the run; the worker's polls and the
recovery sweeps of the same process name none)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from bson import json_util
from pymongo import monitoring

from engine_core import Engine, WorkflowContext
from engine_core.fleet import waiters
from pikku_mongo import MongoStore
from pikku_mongo.writes.journal_writes import BESIDE_AT
from tests.conftest import with_database
from tests.support.shard_key_check import ShardKeyListener


class RunCommands(monitoring.CommandListener):
    """The commands whose body names ``run_id`` (a filter, a document, an ``$in``...)."""

    def __init__(self) -> None:
        self.run_id: str | None = None
        self.commands: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if self.run_id is not None and self.run_id in json_util.dumps(event.command):
            self.commands.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


async def noop() -> None:
    return None


@pytest.mark.parametrize("steps", [1, 10, 100])
async def test_inline_steps_cost_one_command_each(
    nx_uri: str, steps: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The waiter reads a run driven here once it has been awaited for LOCAL_AFTER_S (an
    # operator may stop it from elsewhere); on a loaded machine 100 steps can take longer
    # than that. This budget is the run's own path, so that read stays out of it.
    monkeypatch.setattr(waiters, "LOCAL_AFTER_S", 600.0)
    listener = RunCommands()
    shard_keys = ShardKeyListener()
    store = MongoStore.from_uri(
        with_database(nx_uri, f"rt_{uuid.uuid4().hex[:10]}"),
        event_listeners=[listener, shard_keys],
    )
    engine = Engine(store)

    @engine.workflow("noops")
    async def noops(ctx: WorkflowContext, data: Any) -> int:
        for i in range(steps):
            await ctx.step(f"s{i}", noop)
        return steps

    run_id = f"rt-{uuid.uuid4().hex}"
    async with engine:
        listener.run_id = run_id
        await engine.start("noops", run_id=run_id)
        assert await engine.result(run_id, timeout=30) == steps
        used = list(listener.commands)
        listener.run_id = None
    print(f"{steps} steps: {len(used)} commands: {used}")
    assert len(used) <= steps + 4
    # Insert the run (holding this process's lease), one write per step (each carries
    # the outcome of the one before, to its step record in the same command: nx-27017
    # serves the client-level bulkWrite), settle the run (carrying the last), and no
    # read for the waiter: the run ends in this process, which wakes it. (Where
    # outcomes ride in the run's journal instead, a journal that reaches 64 outcomes
    # is copied to the step records in one bulk write.)
    # Outcomes ride in the run's journal (an update each) until it holds 15: the next
    # write takes them to their step documents with its own (a client-level bulkWrite).
    assert used.count("bulkWrite") == (steps - 1) // BESIDE_AT, used
    assert used.count("insert") == 1
    assert used.count("update") + used.count("bulkWrite") == steps + 1
    assert used.count("find") == 0
    await store.close()
    # The step writes (upserts riding the run's writes) name each step's shard key too.
    assert shard_keys.violations == []
