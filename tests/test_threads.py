"""Plain (non-async) step functions run in a worker thread: the event loop goes on, so
leases and claims are renewed and other runs progress while one blocks."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from engine_core import Engine, WorkflowContext, current_step

#: The shortest lease used in these tests; a step blocks for three times as long.
LEASE = 0.5
BLOCK = 3 * LEASE


def _build(
    engine: Engine, calls: list[tuple[str, int]], threads: set[str], ends: list[float]
) -> None:
    def call(name: str) -> str:
        info = current_step()
        assert info is not None, "the step's context is carried into its thread"
        calls.append((info.step, info.attempt))
        threads.add(threading.current_thread().name)
        time.sleep(BLOCK)
        ends.append(time.monotonic())
        return f"{name} done"

    @engine.step_function("blocking")
    def blocking(payload: str) -> str:
        return call(payload)

    @engine.workflow("inline")
    async def inline(ctx: WorkflowContext, data: Any) -> str:
        out: str = await ctx.step("call", call, "inline")
        return out

    @engine.workflow("dispatched")
    async def dispatched(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.dispatch("call", "blocking", "dispatched")

    @engine.workflow("quick")
    async def quick(ctx: WorkflowContext, data: Any) -> int:
        for i in range(3):
            await ctx.step(f"s{i}", asyncio.sleep, 0)
        return 3


async def test_a_blocking_step_runs_once_while_other_runs_progress(
    make_engine: Callable[..., Engine],
) -> None:
    calls: list[tuple[str, int]] = []
    threads: set[str] = set()
    ends: list[float] = []
    options: dict[str, Any] = {
        "lease_ttl": LEASE,
        "recovery_interval": "100ms",
        "stalled_after": "200ms",
        "undispatched_after": "200ms",
    }
    first = make_engine(**options)
    second = make_engine(**options)
    _build(first, calls, threads, ends)
    _build(second, calls, threads, ends)
    async with first, second:
        inline_id = await first.start("inline")
        dispatched_id = await first.start("dispatched")
        while len(calls) < 2:  # both blocking calls under way
            await asyncio.sleep(0.01)
        quick_id = await second.start("quick")
        assert await second.result(quick_id, timeout=BLOCK) == 3
        assert not ends  # the quick run ended while both steps were still blocking
        assert await first.result(inline_id, timeout=10) == "inline done"
        assert await first.result(dispatched_id, timeout=10) == "dispatched done"
        await asyncio.sleep(3 * LEASE)  # time for a recovery to take a step for lost
    assert sorted(calls) == [("call", 1), ("call", 1)]
    assert threading.main_thread().name not in threads
    for run_id in (inline_id, dispatched_id):
        step = (await first.status(run_id)).steps["call"]
        assert (step.status, step.attempts, step.error) == ("succeeded", 1, None)
        history = await first.history(run_id)
        assert not any("Lost" in str(entry) for entry in history)


async def test_a_thread_past_its_timeout_fails_the_attempt_and_its_late_result_is_dropped(
    engine: Engine,
) -> None:
    finished = threading.Event()
    attempts: list[int] = []

    def slow() -> str:
        info = current_step()
        assert info is not None
        attempts.append(info.attempt)
        if info.attempt == 1:
            time.sleep(0.6)  # past the timeout: the thread cannot be killed, it runs on
            finished.set()
            return "late"
        return "in time"

    @engine.workflow("slow")
    async def flow(ctx: WorkflowContext, data: Any) -> str:
        out: str = await ctx.step("slow", slow, timeout=0.2, retries=1)
        return out

    async with engine:
        run_id = await engine.start("slow")
        assert await engine.result(run_id, timeout=10) == "in time"
        await asyncio.to_thread(finished.wait, 5)  # the first call ran to its end...
    step = (await engine.status(run_id)).steps["slow"]
    assert (step.status, step.attempts, step.result) == ("succeeded", 2, "in time")
    history = [e for e in await engine.history(run_id) if e.step == "slow"]
    assert "TimeoutError" in str(history)  # ...but attempt 1 failed with its timeout
    assert attempts == [1, 2]
