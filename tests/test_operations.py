"""Operations through the engine API: retrying failed runs, retention."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from engine_core import Engine, WorkflowContext, WorkflowRunFailedError


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
