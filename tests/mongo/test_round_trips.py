"""Round-trip budget: N inline no-op steps cost at most 2N + 6 MongoDB commands from
start to completion on the process that runs the run (counted by a command listener)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pymongo import monitoring

from engine_core import Engine, WorkflowContext
from pikku_mongo import MongoStore
from tests.conftest import with_database


class Counter(monitoring.CommandListener):
    def __init__(self) -> None:
        self.commands: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.commands.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


async def noop() -> None:
    return None


@pytest.mark.parametrize("steps", [1, 10, 100])
async def test_inline_steps_cost_two_commands_each(nx_uri: str, steps: int) -> None:
    listener = Counter()
    store = MongoStore.from_uri(
        with_database(nx_uri, f"rt_{uuid.uuid4().hex[:10]}"), event_listeners=[listener]
    )
    await store.init()
    engine = Engine(store)

    @engine.workflow("noops")
    async def noops(ctx: WorkflowContext, data: Any) -> int:
        for i in range(steps):
            await ctx.step(f"s{i}", noop)
        return steps

    listener.commands.clear()
    run_id = await engine.start("noops")
    await engine.drive(run_id)  # what a worker does with a run it is handed
    used = [c for c in listener.commands if c not in ("ping", "hello", "isMaster", "endSessions")]
    assert (await engine.status(run_id)).status == "completed"
    print(f"{steps} steps: {len(used)} commands: {used[:4]}...{used[-3:]}")
    assert len(used) <= 2 * steps + 6
    # What we reach: 2 per step + start (insert), lease, begin, settle, release.
    assert len(used) == 2 * steps + 5
    await store.close()
