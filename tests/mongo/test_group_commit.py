"""Group commit: concurrent writes share bulk commands, and each learns its own outcome.
Run on both wire servers."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import monitoring

from engine_core import Engine, WorkflowContext, WorkflowRunCancelledError
from engine_core.common.clock import utcnow
from engine_core.common.journal import journals, merged
from engine_core.testing.builders import begin, done_step, make_run
from pikku_mongo import MongoStore
from tests.conftest import with_database


class Commands(monitoring.CommandListener):
    def __init__(self) -> None:
        self.names: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.fixture(params=["nx", "mongoeco"])
async def server(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("nx_uri" if request.param == "nx" else "mongoeco_uri"))


@pytest.fixture
async def listened(server: str) -> AsyncIterator[tuple[MongoStore, Commands]]:
    listener = Commands()
    store = MongoStore.from_uri(
        with_database(server, f"gc_{uuid.uuid4().hex[:10]}"),
        event_listeners=[listener],
        max_clock_skew=0,
    )
    store.run_ops.beside_at = 1  # every outcome beside the run where the server can
    await store.init()
    yield store, listener
    await store.database.client.drop_database(store.database.name)
    await store.close()


async def test_a_failed_guard_in_a_batch_fails_only_its_own_write(
    listened: tuple[MongoStore, Commands],
) -> None:
    store, listener = listened
    tokens = {}
    for i in range(20):
        await store.insert_run(make_run(f"r{i}"))
        tokens[f"r{i}"] = await begin(store, f"r{i}")
    # Three writes that must fail: a stale token, a stopped run, a run that is gone.
    await store.set_run_status("r5", "cancelled", expect=("running",))
    wrong = {"r3": tokens["r3"] + 7}
    listener.names.clear()
    before = store.run_writes.commands

    async def start(run_id: str) -> bool:
        return await store.start_step(
            run_id,
            token=wrong.get(run_id, tokens.get(run_id, 1)),
            status="running",
            key="s",
            attempt=1,
            started_at=utcnow(),
            outcomes=[done_step(run_id, "before")],
        )

    ids = [f"r{i}" for i in range(20)] + ["gone"]
    landed = dict(zip(ids, await asyncio.gather(*(start(r) for r in ids)), strict=True))
    assert {r for r, ok in landed.items() if not ok} == {"r3", "r5", "gone"}
    if journals(store, [done_step("r0", "before")]):
        assert store.run_writes.commands - before == 1  # one bulk for all 21 writes
        assert [n for n in listener.names if n == "update"] == ["update"]
    else:
        # One ordered bulkWrite of the writes and their outcomes; it stops at a failed
        # guard, and what it had not attempted yet goes in one more (r3's, then r5's).
        assert store.run_writes.commands - before == 3
        assert [n for n in listener.names if n == "bulkWrite"] == ["bulkWrite"] * 3
    for run_id in ids[:20]:
        run = await store.get_run(run_id)
        assert run is not None
        assert ("s" in run.inflight) == landed[run_id]
        steps = merged(run, await store.load_steps(run_id))
        assert ("before" in steps) == landed[run_id]
    # The write for a run that does not exist left nothing behind.
    assert await store.get_run("gone") is None
    assert await store.runs.count_documents({"_id": "gone"}) == 0
    assert await store.load_steps("gone") == []


async def test_concurrent_passes_share_their_writes_and_a_stopped_one_fails_alone(
    listened: tuple[MongoStore, Commands],
) -> None:
    store, listener = listened
    engine = Engine(store, concurrency=16)
    gate = asyncio.Event()

    async def wait_gate() -> None:
        await gate.wait()

    @engine.workflow("steps")
    async def steps(ctx: WorkflowContext, data: Any) -> int:
        await ctx.step("gate", wait_gate)
        for i in range(5):
            await ctx.step(f"s{i}", lambda: None)
        return data

    async with engine:
        run_ids = [await engine.start("steps", i) for i in range(16)]
        await asyncio.sleep(0.2)  # every pass is inside its first step
        await engine.cancel(run_ids[7])
        listener.names.clear()
        gate.set()
        results = await asyncio.gather(
            *(engine.result(r, timeout=30) for r in run_ids), return_exceptions=True
        )
    assert isinstance(results[7], WorkflowRunCancelledError)
    assert [r for i, r in enumerate(results) if i != 7] == [i for i in range(16) if i != 7]
    # 15 passes x 6 writes each (5 starts and a settle) went in far fewer commands.
    assert listener.names.count("update") < 15 * 6 / 3
    status = await engine.status(run_ids[7])
    assert status.status == "cancelled" and status.steps["gate"].status == "succeeded"
    assert "s0" not in status.steps  # nothing started after the cancel returned
