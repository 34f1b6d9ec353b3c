"""Issue 19 case 4: the in-memory timers of a run (its ``deadline``, its event timeouts
and sleeps) do not outlive it. A long-lived worker that handles 1,000 runs, each with a
1 h deadline and a 1 h event timeout that never fire, ends with its timer count back at
the idle level and its memory near where it started. (The count is read from the
process's timer structures, which are not public API.)"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from typing import Any

from engine_core import Engine, WorkflowContext

RUNS = 1000
BATCH = 100


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def timer_count(engine: Engine) -> int:
    host = engine._host
    return len(host._timers) + len(host.run_timers._timers)


async def _handle(engine: Engine, first: int, count: int) -> None:
    """Start ``count`` runs, let each park on its event, send it, and see them end (the
    runs of a batch side by side, as a busy worker meets them)."""
    ids = await asyncio.gather(
        *(engine.start("waits", i, deadline="1h") for i in range(first, first + count))
    )

    async def parked(run_id: str) -> None:
        for _ in range(3000):
            steps = (await engine.status(run_id)).steps
            if "go" in steps and steps["go"].status == "scheduled":
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"run {run_id} never waited for its event")

    for run_id in ids:  # one by one: by the time the first has parked, most have
        await parked(run_id)
    await asyncio.gather(*(engine.send_event(run_id, "go", {"n": run_id}) for run_id in ids))
    results = await asyncio.gather(*(engine.result(run_id, timeout=60) for run_id in ids))
    assert results == [{"n": run_id} for run_id in ids]


async def test_ended_runs_leave_no_timers(engine: Engine) -> None:
    @engine.workflow("waits")
    async def waits(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("go", timeout="1h")

    async with engine:
        idle = timer_count(engine)
        await _handle(engine, 0, BATCH)  # warm up: code paths, caches, the store's pools
        gc.collect()
        assert timer_count(engine) == idle
        before = rss_mb()
        peak = 0
        for first in range(BATCH, BATCH + RUNS, BATCH):
            await _handle(engine, first, BATCH)
            peak = max(peak, timer_count(engine))
        gc.collect()
        after, left = rss_mb(), timer_count(engine)
        print(f"timers: idle {idle}, after {RUNS} runs {left}; "
              f"RSS {before:.1f} MB -> {after:.1f} MB")  # fmt: skip
        assert left == idle
        assert after - before < 50


async def test_timers_of_runs_ended_elsewhere_are_dropped(
    make_engine: Callable[..., Engine],
) -> None:
    worker, client = make_engine(), make_engine()
    for engine in (worker, client):

        @engine.workflow("waits")
        async def waits(ctx: WorkflowContext, data: Any) -> Any:
            return await ctx.wait_for_event("go", timeout="1h")

    async with worker:
        idle = timer_count(worker)
        ended, live = [await worker.start("waits", i, deadline="1h") for i in range(2)]
        for _ in range(3000):  # each parks on its event: a deadline and a timeout each
            if timer_count(worker) == idle + 4:
                break
            await asyncio.sleep(0.01)
        assert timer_count(worker) == idle + 4
        # Another process ends one of them: this one learns it at its next look.
        await client.cancel(ended)
        assert await worker._host.prune_timers() == 1
        assert timer_count(worker) == idle + 2
        await worker.cancel(live)
        assert timer_count(worker) == idle


async def test_a_live_run_holds_timers_for_its_current_waits_only(engine: Engine) -> None:
    rounds = 50

    @engine.workflow("loops")
    async def loops(ctx: WorkflowContext, data: Any) -> int:
        for _ in range(rounds):
            await ctx.wait_for_event("tick", timeout="1h")
        await ctx.wait_for_event("last", timeout="1h")
        return rounds

    async def parked_on(run_id: str, key: str) -> None:
        for _ in range(3000):
            step = (await engine.status(run_id)).steps.get(key)
            if step is not None and step.status == "scheduled" and timer_count(engine) == 1:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"run {run_id} did not wait on {key!r} with one timer")

    async with engine:
        run_id = await engine.start("loops")
        for i in range(rounds):
            await parked_on(run_id, "tick" if i == 0 else f"tick#{i}")
            await engine.send_event(run_id, "tick", i)
        # Each wait that ended dropped its timeout's timer: one is left, the current.
        await parked_on(run_id, "last")
        assert timer_count(engine) == 1
        await engine.send_event(run_id, "last", None)
        assert await engine.result(run_id, timeout=30) == rounds
        assert timer_count(engine) == 0
