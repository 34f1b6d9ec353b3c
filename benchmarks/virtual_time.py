"""T2: a month in a test. A workflow that sleeps 30 times for a day each, on the
in-memory store with ``engine_core.testing.VirtualClock`` (docs/guides/testing.md):
the real time from its start to ``engine.result`` returning (the clock skipping each
day while the test awaits), and the CPU time it took. Target: under 0.5 s. A MongoStore
refuses a virtual clock, so the row has no MongoStore figure."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from benchmarks.common import Measurement
from engine_core import Engine, WorkflowContext
from engine_core.memory import InMemoryStore
from engine_core.testing import VirtualClock

#: Days slept, one sleep each.
DAYS = 30
START = datetime(2026, 1, 1, tzinfo=UTC)


async def thirty_days(days: int = DAYS) -> Measurement:
    """One repetition: a fresh engine and clock, one run of ``days`` one-day sleeps."""
    clock = VirtualClock(START)
    engine = Engine(InMemoryStore(), clock=clock)

    @engine.workflow("month")
    async def month(ctx: WorkflowContext, data: Any) -> int:
        for day in range(days):
            await ctx.sleep(f"day-{day}", "1d")
        return days

    async with engine:
        began, cpu = time.perf_counter(), time.process_time()
        run_id = await engine.start("month")
        await engine.result(run_id, timeout=60)
        seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
    if clock.now() != START + timedelta(days=days):
        raise RuntimeError(f"the clock shows {clock.now()}, not {days} days on")
    return Measurement(seconds, days, {}, {"real_ms": seconds * 1000, "cpu_ms": cpu * 1000})
