"""Steps that wait outside a pass: sleeps, events, child runs and dispatched steps."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from engine_core import (
    Engine,
    StepFailedError,
    WorkflowContext,
    WorkflowRunFailedError,
    current_step,
)
from engine_core.common.clock import utcnow
from engine_core.store import Store
from tests.conftest import open_store


@pytest.fixture(params=["memory", "mongo", "mongo-targeted"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """These tests also run with targeted polling forced on (the job and line indexes a
    sharded cluster gets)."""
    made = await open_store(request)
    yield made
    await made.close()


async def test_sleep_parks_the_run_and_wakes_it(engine: Engine) -> None:
    @engine.workflow("sleeper")
    async def sleeper(ctx: WorkflowContext, data: Any) -> str:
        await ctx.sleep("nap", "300ms")
        return "awake"

    async with engine:
        began = utcnow()
        run_id = await engine.start("sleeper")
        await asyncio.sleep(0.1)
        nap = (await engine.status(run_id)).steps["nap"]
        assert nap.status == "scheduled"
        assert await engine.result(run_id, timeout=10) == "awake"
        assert (utcnow() - began).total_seconds() >= 0.29


async def test_an_event_sent_before_the_wait_is_kept(engine: Engine) -> None:
    @engine.workflow("approval")
    async def approval(ctx: WorkflowContext, data: Any) -> Any:
        await ctx.sleep("first", "200ms")
        return await ctx.wait_for_event("approve")

    async with engine:
        run_id = await engine.start("approval")
        await engine.send_event(run_id, "approve", {"ok": True})
        assert await engine.result(run_id, timeout=10) == {"ok": True}


async def test_an_event_sent_during_the_wait_wakes_the_run(engine: Engine) -> None:
    @engine.workflow("approval")
    async def approval(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("approve", timeout="1h")

    async with engine:
        run_id = await engine.start("approval")
        await asyncio.sleep(0.2)
        assert (await engine.status(run_id)).steps["approve"].status == "scheduled"
        await engine.send_event(run_id, "approve", "yes")
        assert await engine.result(run_id, timeout=10) == "yes"


async def test_an_event_wait_times_out_with_none(engine: Engine) -> None:
    @engine.workflow("impatient")
    async def impatient(ctx: WorkflowContext, data: Any) -> Any:
        return {"got": await ctx.wait_for_event("approve", timeout="200ms")}

    async with engine:
        run_id = await engine.start("impatient")
        assert await engine.result(run_id, timeout=10) == {"got": None}


async def test_each_wait_consumes_the_oldest_event_of_its_name(engine: Engine) -> None:
    @engine.workflow("collector")
    async def collector(ctx: WorkflowContext, data: Any) -> list[Any]:
        return [await ctx.wait_for_event("item") for _ in range(3)]

    async with engine:
        run_id = await engine.start("collector")
        for i in range(3):
            await engine.send_event(run_id, "item", i)
        await engine.send_event(run_id, "other", "ignored")
        assert await engine.result(run_id, timeout=10) == [0, 1, 2]
    assert set((await engine.status(run_id)).steps) == {"item", "item#1", "item#2"}


async def test_a_child_run_returns_its_output(engine: Engine) -> None:
    @engine.workflow("shipping")
    async def shipping(ctx: WorkflowContext, data: Any) -> dict[str, Any]:
        label = await ctx.step("label", lambda: f"label-{data['order']}")
        return {"label": label}

    @engine.workflow("order")
    async def order(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.child("ship", "shipping", {"order": data["id"]})

    async with engine:
        run_id = await engine.start("order", {"id": 7})
        assert await engine.result(run_id, timeout=10) == {"label": "label-7"}
    children = [r for r in await engine.list_runs(workflow="shipping")]
    assert len(children) == 1 and children[0].parent_run_id == run_id
    assert children[0].status == "completed"


async def test_a_failed_child_fails_the_parents_step(engine: Engine) -> None:
    seen: dict[str, Any] = {}

    @engine.workflow("bad-child")
    async def bad_child(ctx: WorkflowContext, data: Any) -> None:
        raise ValueError("child broke")

    @engine.workflow("parent")
    async def parent(ctx: WorkflowContext, data: Any) -> str:
        try:
            await ctx.child("kid", "bad-child")
        except StepFailedError as exc:
            seen.update(error_type=exc.error_type, message=str(exc))
            return "recovered"
        return "no"

    async with engine:
        run_id = await engine.start("parent")
        assert await engine.result(run_id, timeout=10) == "recovered"
    assert seen["error_type"] == "WorkflowRunFailedError"
    assert "child broke" in seen["message"]


async def test_a_child_cancelled_on_its_own_fails_the_parents_step(engine: Engine) -> None:
    @engine.workflow("waits")
    async def waits(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("never")

    @engine.workflow("parent")
    async def parent(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.child("kid", "waits")

    async with engine:
        run_id = await engine.start("parent")
        children: list[Any] = []
        for _ in range(100):
            children = await engine.list_runs(workflow="waits")
            if children:
                break
            await asyncio.sleep(0.02)
        await engine.cancel(children[0].run_id)
        with pytest.raises(WorkflowRunFailedError):
            await engine.result(run_id, timeout=10)
    status = await engine.status(run_id)
    assert status.error is not None
    assert status.error["error_type"] == "WorkflowRunCancelledError"
    assert status.steps["kid"].error is not None
    assert status.steps["kid"].error["type"] == "WorkflowRunCancelledError"


async def test_dispatched_steps_run_on_a_worker(make_engine: Callable[..., Engine]) -> None:
    orchestrator, worker = make_engine(), make_engine()
    ran_on: list[str] = []

    @worker.step_function("send-email")
    async def send_email(payload: dict[str, Any]) -> dict[str, Any]:
        info = current_step()
        assert info is not None
        ran_on.append(info.step)
        return {"sent": payload["to"]}

    for engine in (orchestrator, worker):

        @engine.workflow("notify")
        async def notify(ctx: WorkflowContext, data: Any) -> Any:
            return await ctx.dispatch("email", "send-email", {"to": data})

    async with orchestrator, worker:
        run_id = await orchestrator.start("notify", "a@example.com")
        assert await orchestrator.result(run_id, timeout=10) == {"sent": "a@example.com"}
    assert ran_on == ["email"]


async def test_dispatched_step_retries_then_fails(engine: Engine) -> None:
    attempts: list[int] = []

    @engine.step_function("flaky")
    async def flaky(payload: Any) -> None:
        info = current_step()
        assert info is not None
        attempts.append(info.attempt)
        raise RuntimeError(f"attempt {info.attempt}")

    @engine.workflow("uses-flaky")
    async def uses(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.dispatch("call", "flaky", None, retries=2, retry_delay="10ms")

    async with engine:
        run_id = await engine.start("uses-flaky")
        with pytest.raises(WorkflowRunFailedError, match="attempt 3"):
            await engine.result(run_id, timeout=10)
    assert attempts == [1, 2, 3]
    step = (await engine.status(run_id)).steps["call"]
    assert (step.status, step.attempts) == ("failed", 3)


async def test_gathered_dispatches_all_complete(engine: Engine) -> None:
    @engine.step_function("square")
    async def square(payload: int) -> int:
        return payload * payload

    @engine.workflow("squares")
    async def squares(ctx: WorkflowContext, data: Any) -> list[int]:
        return list(await asyncio.gather(*(ctx.dispatch(f"sq-{i}", "square", i) for i in range(5))))

    async with engine:
        run_id = await engine.start("squares")
        assert await engine.result(run_id, timeout=20) == [0, 1, 4, 9, 16]
