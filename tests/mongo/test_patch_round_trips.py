"""A patch marker rides the pass's next write: a workflow of N inline steps that takes a
patch still costs N + 4 commands (see ``test_round_trips``)."""

from __future__ import annotations

import uuid
from typing import Any

from engine_core import Engine, WorkflowContext
from pikku_mongo import MongoStore
from tests.conftest import with_database
from tests.mongo.test_round_trips import RunCommands, noop


async def test_a_patch_costs_no_command(nx_uri: str) -> None:
    steps = 10
    listener = RunCommands()
    store = MongoStore.from_uri(
        with_database(nx_uri, f"rtp_{uuid.uuid4().hex[:10]}"), event_listeners=[listener]
    )
    engine = Engine(store)

    @engine.workflow("patched")
    async def patched(ctx: WorkflowContext, data: Any) -> int:
        for i in range(steps):
            if i == 3:
                assert await ctx.patched("p")
            await ctx.step(f"s{i}", noop)
        return steps

    run_id = f"rtp-{uuid.uuid4().hex}"
    async with engine:
        listener.run_id = run_id
        await engine.start("patched", run_id=run_id)
        assert await engine.result(run_id, timeout=30) == steps
        used = list(listener.commands)
        listener.run_id = None
    assert len(used) <= steps + 4, used
    assert (await engine.status(run_id)).patches == ["p"]
    await store.close()
