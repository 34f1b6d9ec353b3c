"""Operations through the engine API: retrying failed runs, retention, and what the
dashboard reads (filters, counts, workflow names, children, trace ids)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engine_core import Engine, InvalidRunIdError, WorkflowContext, WorkflowRunFailedError


async def test_retry_gives_a_failed_run_a_new_pass_from_its_failed_step(engine: Engine) -> None:
    ran: list[str] = []
    broken = {"on": True}

    def first() -> str:
        ran.append("first")
        return "one"

    def second() -> str:
        ran.append("second")
        if broken["on"]:
            raise ConnectionError("service down")
        return "two"

    @engine.workflow("fixable")
    async def fixable(ctx: WorkflowContext, data: Any) -> list[str]:
        return [await ctx.step("first", first), await ctx.step("second", second, retries=1)]

    async with engine:
        run_id = await engine.start("fixable")
        with pytest.raises(WorkflowRunFailedError, match="service down"):
            await engine.result(run_id, timeout=10)
        broken["on"] = False
        await engine.retry(run_id)
        assert await engine.result(run_id, timeout=10) == ["one", "two"]
    assert ran == ["first", "second", "second", "second"]
    assert (await engine.status(run_id)).steps["second"].attempts == 3


async def test_only_failed_runs_can_be_retried(engine: Engine) -> None:
    @engine.workflow("fine")
    async def fine(ctx: WorkflowContext, data: Any) -> int:
        return 1

    async with engine:
        run_id = await engine.start("fine")
        await engine.result(run_id, timeout=10)
    with pytest.raises(ValueError, match="only a failed run can be retried"):
        await engine.retry(run_id)


async def test_retention_deletes_old_finished_runs_only(engine: Engine) -> None:
    @engine.workflow("quick")
    async def quick(ctx: WorkflowContext, data: Any) -> int:
        await ctx.step("s", lambda: 1)
        return 1

    @engine.workflow("waits")
    async def waits(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("never")

    async with engine:
        done = await engine.start("quick")
        await engine.result(done, timeout=10)
        waiting = await engine.start("waits")
        assert await engine.delete_finished_runs("1h") == 0
        await asyncio.sleep(0.02)
        assert await engine.delete_finished_runs(0) == 1
    assert [r.run_id for r in await engine.list_runs()] == [waiting]
    assert (await engine.status(waiting)).status == "running"


async def test_list_runs_by_prefix_and_time_counts_and_workflow_names(engine: Engine) -> None:
    @engine.workflow("a")
    async def a(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("never")

    @engine.workflow("b")
    async def b(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("never")

    assert await engine.list_workflows() == [] and await engine.count_runs() == {}
    before = datetime.now(UTC) - timedelta(seconds=1)
    for run_id in ("order/1", "order/2", "order?3", "other"):
        await engine.start("a", {"id": run_id}, run_id=run_id)
    await engine.start("b", run_id="b-1")
    await engine.suspend("order/2")
    assert await engine.list_workflows() == ["a", "b"]
    assert await engine.count_runs() == {"running": 4, "suspended": 1}
    assert await engine.count_runs("a") == {"running": 3, "suspended": 1}
    listed = await engine.list_runs(prefix="order/", order="id")
    assert [r.run_id for r in listed] == ["order/1", "order/2"]
    assert listed[0].input == {"id": "order/1"}
    assert [
        r.run_id for r in await engine.list_runs(prefix="order", after="order/2", order="id")
    ] == ["order?3"]
    assert len(await engine.list_runs(created_since=before)) == 5
    assert await engine.list_runs(created_before=before) == []
    assert await engine.list_runs(prefix="") == await engine.list_runs()
    with pytest.raises(InvalidRunIdError):
        await engine.list_runs(prefix="x" * 201)
    with pytest.raises(ValueError, match="timezone-aware"):
        await engine.list_runs(created_since=datetime(2026, 1, 1))


async def test_children_parent_step_and_trace_id(engine: Engine) -> None:
    @engine.workflow("kid")
    async def kid(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("never")

    @engine.workflow("parent")
    async def parent(ctx: WorkflowContext, data: Any) -> Any:
        return await asyncio.gather(ctx.child("k1", "kid"), ctx.child("k2", "kid"))

    async with engine:
        run_id = await engine.start("parent", run_id="p")
        for _ in range(500):
            if len(await engine.list_children(run_id)) == 2:
                break
            await asyncio.sleep(0.01)
        children = await engine.list_children(run_id)
        assert [c.run_id for c in children] == ["p:k1", "p:k2"]
        assert {c.parent_run_id for c in children} == {"p"}
        assert [c.parent_step for c in children] == ["k1", "k2"]
        status = await engine.status(run_id)
        assert status.trace_id is not None and len(status.trace_id) == 32
        assert {c.trace_id for c in children} == {status.trace_id}
        assert await engine.list_children("p:k1") == []
        await engine.cancel(run_id)
