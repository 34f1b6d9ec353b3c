"""Recovery inside one process: lost timers, lost attempts, the backoff, the report.
(The same guarantees across real processes killed with SIGKILL are in tests/chaos.)"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from engine_core import Engine, WorkflowContext, WorkflowRunFailedError
from engine_core.fleet.recovery import BACKOFF_MAX_S, BACKOFF_START_S, RedispatchBackoff


def register_sleeper(engine: Engine, delay: str) -> None:
    @engine.workflow("sleeper")
    async def sleeper(ctx: WorkflowContext, data: Any) -> str:
        await ctx.sleep("nap", delay)
        return "woke"


async def test_startup_rearms_a_sleep_not_yet_due(make_engine: Callable[..., Engine]) -> None:
    first, second = make_engine(), make_engine()
    register_sleeper(first, "600ms")
    register_sleeper(second, "600ms")
    async with first:
        run_id = await first.start("sleeper")
        await asyncio.sleep(0.2)  # parked on the sleep; leaving drops this process's timer
    assert (await first.status(run_id)).steps["nap"].status == "scheduled"
    loop = asyncio.get_running_loop()
    began = loop.time()
    async with second:
        assert await second.result(run_id, timeout=10) == "woke"
    # It woke at the original wake time, not a restarted one.
    assert loop.time() - began < 1.0


async def test_recovery_wakes_an_overdue_sleep_and_reports_it(
    make_engine: Callable[..., Engine],
) -> None:
    first, second = make_engine(), make_engine()
    register_sleeper(first, "100ms")
    register_sleeper(second, "100ms")
    async with first:
        run_id = await first.start("sleeper")
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)
    report = await second.recover(startup=True)  # as a client: the run is owed a pass
    assert report.woken == 1 and report.runs == [run_id]
    async with second:
        assert await second.result(run_id, timeout=10) == "woke"


def register_doomed(engine: Engine, calls: list[int], step: str, retries: int) -> None:
    """``doomed``: one step whose every attempt takes its pass down, recording nothing."""

    def dies() -> None:
        calls.append(1)
        raise asyncio.CancelledError()  # the pass dies mid-step, recording nothing

    @engine.workflow("doomed")
    async def doomed(ctx: WorkflowContext, data: Any) -> None:
        await ctx.step(step, dies, retries=retries)


async def test_a_step_that_kills_its_process_every_time_fails_the_run(engine: Engine) -> None:
    calls: list[int] = []
    register_doomed(engine, calls, "fatal", retries=2)

    run_id = await engine.start("doomed")
    for _ in range(10):
        if (await engine.status(run_id)).status != "running":
            break
        with pytest.raises(asyncio.CancelledError):
            await engine.drive(run_id)
        await engine.store.request_pass(run_id)
        if len(calls) == 3:
            await engine.drive(run_id)
    with pytest.raises(WorkflowRunFailedError, match="'fatal' failed after 3 attempt"):
        await engine.result(run_id, timeout=1)
    assert len(calls) == 3
    status = await engine.status(run_id)
    assert status.error is not None
    assert (status.error["step"], status.error["attempts"]) == ("fatal", 3)
    assert status.error["error_type"] == "WorkerLost"


async def test_a_client_engine_does_not_run_steps(engine: Engine) -> None:
    ran: list[int] = []

    @engine.workflow("w")
    async def w(ctx: WorkflowContext, data: Any) -> None:
        await ctx.step("s", lambda: ran.append(1))

    run_id = await engine.start("w")
    await asyncio.sleep(0.1)
    assert ran == [] and (await engine.status(run_id)).status == "running"


def test_backoff_doubles_caps_and_forgets() -> None:
    backoff = RedispatchBackoff(max_entries=3)
    assert backoff.eligible("r", 0)
    backoff.note("r", 0)
    assert not backoff.eligible("r", BACKOFF_START_S - 1)
    assert backoff.eligible("r", BACKOFF_START_S)
    now = 0.0
    for _ in range(10):
        backoff.note("r", now)
    assert not backoff.eligible("r", now + BACKOFF_MAX_S - 1)
    assert backoff.eligible("r", now + BACKOFF_MAX_S)
    backoff.forget("r")
    assert backoff.eligible("r", now)
    for name in "abcd":
        backoff.note(name, now)
    assert len(backoff) == 3 and backoff.eligible("a", now)


async def test_leaving_async_with_lets_running_steps_finish(
    make_engine: Callable[..., Engine],
) -> None:
    first, second = make_engine(), make_engine()
    entered = asyncio.Event()
    ran: list[str] = []

    async def slow() -> str:
        entered.set()
        await asyncio.sleep(0.3)
        ran.append("slow")
        return "slow-done"

    for engine in (first, second):

        @engine.workflow("graceful")
        async def graceful(ctx: WorkflowContext, data: Any) -> list[str]:
            a = await ctx.step("slow", slow)
            b = await ctx.step("next", lambda: ran.append("next") or "next-done")
            return [a, b]

    async with first:
        run_id = await first.start("graceful")
        await asyncio.wait_for(entered.wait(), 5)
    # The running step finished and recorded; the next one was left to the fleet.
    status = await first.status(run_id)
    assert ran == ["slow"] and status.steps["slow"].status == "succeeded"
    assert "next" not in status.steps
    async with second:
        assert await second.result(run_id, timeout=10) == ["slow-done", "next-done"]
    assert ran == ["slow", "next"]
    assert (await second.status(run_id)).steps["slow"].attempts == 1


async def test_a_lost_attempt_of_a_step_without_retries_fails_the_run_saying_why(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """``retries=0`` (the default): the one attempt died with its process, so the run
    fails, and its error says so plainly and what to change."""
    calls: list[int] = []
    register_doomed(engine, calls, "pack", retries=0)
    run_id = await engine.start("doomed")
    with pytest.raises(asyncio.CancelledError):
        await engine.drive(run_id)
    await engine.store.request_pass(run_id)
    with caplog.at_level("WARNING", logger="engine_core"):
        await engine.drive(run_id)
    said = (
        "attempt 1 was lost with its process; the step allows no retries: "
        "set retries= to let another worker take it over"
    )
    with pytest.raises(WorkflowRunFailedError, match=said):
        await engine.result(run_id, timeout=1)
    assert len(calls) == 1
    status = await engine.status(run_id)
    assert status.error is not None and status.error["error_type"] == "WorkerLost"
    [line] = [r for r in caplog.records if "lost with its process" in r.getMessage()]
    assert said in line.getMessage()
    assert (line.run_id, line.workflow, line.step) == (run_id, "doomed", "pack")  # type: ignore[attr-defined]
