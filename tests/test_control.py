"""Cancel, suspend, resume and compensation."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from engine_core import (
    Engine,
    WorkflowContext,
    WorkflowRunCancelledError,
    WorkflowRunFailedError,
)


async def wait_for_status(engine: Engine, run_id: str, step: str, status: str) -> None:
    for _ in range(500):
        steps = (await engine.status(run_id)).steps
        if step in steps and steps[step].status == status:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"step {step} never reached {status}")


def register_waiter(engine: Engine, ran: list[str]) -> None:
    @engine.workflow("waiter")
    async def waiter(ctx: WorkflowContext, data: Any) -> str:
        await ctx.step("before", lambda: ran.append("before"))
        await ctx.sleep("wait", "400ms")
        await ctx.step("after", lambda: ran.append("after"))
        return "done"


async def test_cancel_stops_a_waiting_run_at_once(engine: Engine) -> None:
    ran: list[str] = []
    register_waiter(engine, ran)
    async with engine:
        run_id = await engine.start("waiter")
        await wait_for_status(engine, run_id, "wait", "scheduled")
        await engine.cancel(run_id)
        assert (await engine.status(run_id)).status == "cancelled"
        with pytest.raises(WorkflowRunCancelledError, match="cancelled"):
            await engine.result(run_id, timeout=5)
        await asyncio.sleep(0.6)
    assert ran == ["before"]
    assert (await engine.status(run_id)).status == "cancelled"


async def test_cancel_cascades_to_children(engine: Engine) -> None:
    @engine.workflow("child")
    async def child(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("never")

    @engine.workflow("parent")
    async def parent(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.child("kid", "child")

    async with engine:
        run_id = await engine.start("parent")
        await wait_for_status(engine, run_id, "kid", "scheduled")
        await engine.cancel(run_id)
    children = await engine.list_runs(workflow="child")
    assert [c.status for c in children] == ["cancelled"]


async def test_a_stop_wins_over_completing(engine: Engine) -> None:
    entered = asyncio.Event()
    release = asyncio.Event()
    ran: list[str] = []

    async def long_step() -> str:
        entered.set()
        await release.wait()
        ran.append("long")
        return "finished"

    @engine.workflow("racing")
    async def racing(ctx: WorkflowContext, data: Any) -> str:
        value = await ctx.step("long", long_step)
        await ctx.step("next", lambda: ran.append("next"))
        return str(value)

    async with engine:
        run_id = await engine.start("racing")
        await asyncio.wait_for(entered.wait(), 5)
        await engine.cancel(run_id)
        assert (await engine.status(run_id)).status == "cancelled"
        release.set()
        with pytest.raises(WorkflowRunCancelledError):
            await engine.result(run_id, timeout=5)
        await asyncio.sleep(0.1)
    status = await engine.status(run_id)
    assert status.status == "cancelled"
    assert ran == ["long"]  # the running step finished and recorded; no new step started
    assert status.steps["long"].status == "succeeded"
    assert "next" not in status.steps


async def test_suspend_and_resume(engine: Engine) -> None:
    ran: list[str] = []
    register_waiter(engine, ran)
    async with engine:
        run_id = await engine.start("waiter")
        await wait_for_status(engine, run_id, "wait", "scheduled")
        await engine.suspend(run_id)
        assert (await engine.status(run_id)).status == "suspended"
        with pytest.raises(TimeoutError):
            await engine.result(run_id, timeout=0.8)  # a suspended run does not end the wait
        assert ran == ["before"]
        await engine.resume(run_id)
        assert await engine.result(run_id, timeout=10) == "done"
    assert ran == ["before", "after"]


async def test_suspend_halts_dispatched_steps(engine: Engine) -> None:
    ran: list[int] = []

    @engine.step_function("work")
    async def work(payload: int) -> int:
        ran.append(payload)
        return payload

    @engine.workflow("dispatcher")
    async def dispatcher(ctx: WorkflowContext, data: Any) -> Any:
        await ctx.wait_for_event("go")
        return await ctx.dispatch("job", "work", 5)

    async with engine:
        run_id = await engine.start("dispatcher")
        await wait_for_status(engine, run_id, "go", "scheduled")
        await engine.suspend(run_id)
        await engine.send_event(run_id, "go")
        await asyncio.sleep(0.3)
        assert ran == []
        await engine.resume(run_id)
        assert await engine.result(run_id, timeout=10) == 5


async def test_cancel_and_suspend_leave_terminal_runs_alone(engine: Engine) -> None:
    @engine.workflow("quick")
    async def quick(ctx: WorkflowContext, data: Any) -> int:
        return 1

    async with engine:
        run_id = await engine.start("quick")
        assert await engine.result(run_id, timeout=5) == 1
        await engine.cancel(run_id)
        await engine.suspend(run_id)
        await engine.resume(run_id)
    assert (await engine.status(run_id)).status == "completed"


def register_booking(engine: Engine, undone: list[str], fail_undo: set[str]) -> None:
    def undo(name: str) -> Any:
        def run(result: Any) -> None:
            if name in fail_undo:
                raise RuntimeError(f"cannot undo {name}")
            undone.append(f"{name}:{result}")

        return run

    @engine.workflow("booking")
    async def booking(ctx: WorkflowContext, data: Any) -> None:
        await ctx.step("flight", lambda: "F1", compensate=undo("flight"))
        await ctx.step("plain", lambda: "no-undo")
        await ctx.step("hotel", lambda: "H1", compensate=undo("hotel"))
        if data == "wait":
            await ctx.wait_for_event("never")
        await ctx.step("car", lambda: 1 / 0, compensate=undo("car"))


async def test_compensations_run_in_reverse_order(engine: Engine) -> None:
    undone: list[str] = []
    register_booking(engine, undone, set())
    async with engine:
        run_id = await engine.start("booking")
        with pytest.raises(WorkflowRunFailedError, match="division by zero"):
            await engine.result(run_id, timeout=10)
    status = await engine.status(run_id)
    assert status.status == "compensated"
    assert undone == ["hotel:H1", "flight:F1"]  # the failed step "car" is not compensated
    assert status.error is not None and status.error["error_type"] == "ZeroDivisionError"


async def test_a_failing_compensation_ends_compensation_failed(engine: Engine) -> None:
    undone: list[str] = []
    register_booking(engine, undone, {"hotel"})
    async with engine:
        run_id = await engine.start("booking")
        with pytest.raises(WorkflowRunFailedError, match="compensation failed for: hotel"):
            await engine.result(run_id, timeout=10)
    status = await engine.status(run_id)
    assert status.status == "compensation_failed"
    assert status.error is not None and status.error["compensation_failed"] == ["hotel"]
    assert undone == ["flight:F1"]


async def test_a_failure_with_nothing_to_compensate_ends_failed(engine: Engine) -> None:
    @engine.workflow("plain")
    async def plain(ctx: WorkflowContext, data: Any) -> None:
        await ctx.step("a", lambda: 1)
        raise RuntimeError("plain failure")

    async with engine:
        run_id = await engine.start("plain")
        with pytest.raises(WorkflowRunFailedError):
            await engine.result(run_id, timeout=10)
    assert (await engine.status(run_id)).status == "failed"


async def test_cancel_with_compensate_undoes_finished_steps(engine: Engine) -> None:
    undone: list[str] = []
    register_booking(engine, undone, set())
    async with engine:
        run_id = await engine.start("booking", "wait")
        await wait_for_status(engine, run_id, "never", "scheduled")
        await engine.cancel(run_id, compensate=True)
        with pytest.raises(WorkflowRunFailedError) as raised:
            await engine.result(run_id, timeout=10)
    assert raised.value.error is not None
    assert raised.value.error["type"] == "WorkflowRunCancelledError"
    assert (await engine.status(run_id)).status == "compensated"
    assert undone == ["hotel:H1", "flight:F1"]


async def test_cancel_with_compensate_and_nothing_to_undo_ends_cancelled(engine: Engine) -> None:
    ran: list[str] = []
    register_waiter(engine, ran)
    async with engine:
        run_id = await engine.start("waiter")
        await wait_for_status(engine, run_id, "wait", "scheduled")
        await engine.cancel(run_id, compensate=True)
        with pytest.raises(WorkflowRunCancelledError):
            await engine.result(run_id, timeout=10)


async def test_result_raises_as_soon_as_a_run_is_cancelled_while_its_step_runs_here(
    make_engine: Any,
) -> None:
    """The process awaiting the result drives the run, its step still running; an
    operator cancels the run from another process: ``result`` raises at once (within
    about a second), not when the step ends (never, here) or at its timeout."""
    worker, operator = make_engine(), make_engine()
    started = asyncio.Event()

    async def slow() -> str:
        started.set()
        await asyncio.sleep(3600)
        return "late"

    @worker.workflow("slow")
    async def flow(ctx: WorkflowContext, data: Any) -> str:
        return str(await ctx.step("slow", slow))

    async with worker:
        run_id = await worker.start("slow")
        await asyncio.wait_for(started.wait(), 10)
        waiting = asyncio.ensure_future(worker.result(run_id))
        await asyncio.sleep(0.2)
        await operator.cancel(run_id)
        with pytest.raises(WorkflowRunCancelledError):
            await asyncio.wait_for(waiting, 20)  # the step would run for an hour
