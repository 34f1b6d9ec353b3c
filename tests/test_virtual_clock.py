"""``engine_core.testing.VirtualClock``: time that moves only when told, or skips ahead
inside ``engine.result`` while every run waits only on time (docs/guides/testing.md).
Its input checks, its alarms, and what makes it move or hold still; the engine's
features on it: ``test_virtual_time.py``."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from engine_core import Engine, InvalidDurationError, WorkflowContext
from engine_core.common.clock import utcnow
from engine_core.memory import InMemoryStore
from engine_core.testing import VirtualClock

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_a_naive_start_is_refused_and_an_aware_one_is_shown_in_utc() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        VirtualClock(datetime(2026, 3, 1, 12, 0))
    helsinki = VirtualClock(datetime(2026, 3, 1, 14, 0, tzinfo=ZoneInfo("Europe/Helsinki")))
    assert helsinki.now() == START and helsinki.now().tzinfo is UTC
    with pytest.raises(TypeError):
        VirtualClock("2026-03-01")  # type: ignore[arg-type]
    began = utcnow()
    assert began - timedelta(seconds=5) <= VirtualClock().now() <= utcnow()  # the real now


@pytest.mark.parametrize(
    "bad", [-1, "-1s", "soon", "1 fortnight", timedelta(seconds=-5), float("nan"), True, None]
)
async def test_advance_refuses_a_negative_or_malformed_duration(bad: Any) -> None:
    clock = VirtualClock(START)
    with pytest.raises(InvalidDurationError) as refused:
        await clock.advance(bad)
    assert isinstance(refused.value, ValueError)
    assert clock.now() == START  # nothing moved


async def test_advance_takes_a_string_seconds_or_a_timedelta() -> None:
    clock = VirtualClock(START)
    await clock.advance("2d")
    await clock.advance(90)
    await clock.advance(timedelta(milliseconds=1500))
    await clock.advance(0)
    assert clock.now() == START + timedelta(days=2, seconds=91.5)


async def test_alarms_ring_in_time_order_each_at_its_own_time() -> None:
    clock = VirtualClock(START)
    rung: list[tuple[str, datetime]] = []

    def ring(name: str) -> Any:
        return lambda: rung.append((name, clock.now()))

    for name, hours in [("c", 3), ("a", 1), ("b", 2), ("late", 30), ("cancelled", 2)]:
        alarm = clock.call_at(START + timedelta(hours=hours), ring(name))
    alarm.cancel()
    assert clock.next_due() == START + timedelta(hours=1)
    await clock.advance("1d")
    assert rung == [(n, START + timedelta(hours=h)) for n, h in [("a", 1), ("b", 2), ("c", 3)]]
    assert clock.now() == START + timedelta(days=1)
    clock.call_at(START, ring("past"))  # already due: rung soon, without moving
    await asyncio.sleep(0)
    assert rung[-1] == ("past", START + timedelta(days=1))


def _sleeper(engine: Engine, clock: VirtualClock) -> None:
    @engine.workflow("sleeper")
    async def sleeper(ctx: WorkflowContext, days: int) -> list[str]:
        seen = []
        for day in range(days):
            await ctx.sleep(f"day-{day}", "1d")
            seen.append(await ctx.step(f"look-{day}", _now_of, clock))
        return seen


async def _now_of(clock: VirtualClock) -> str:
    return clock.now().isoformat()


async def test_thirty_days_of_sleeps_pass_inside_result() -> None:
    clock = VirtualClock(START)
    engine = Engine(InMemoryStore(), clock=clock)
    _sleeper(engine, clock)
    async with engine:
        run_id = await engine.start("sleeper", 30)
        seen = await engine.result(run_id, timeout=10)  # real seconds; T2 measures it
        status = await engine.status(run_id)
    assert seen == [(START + timedelta(days=d + 1)).isoformat() for d in range(30)]
    assert clock.now() == START + timedelta(days=30)
    # Recorded in virtual time: the run began at the start, ended 30 days later.
    assert status.created_at == START and status.updated_at == START + timedelta(days=30)


async def test_advance_fires_nothing_before_it_is_due() -> None:
    clock = VirtualClock(START)
    engine = Engine(InMemoryStore(), clock=clock)

    @engine.workflow("trial")
    async def trial(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("upgraded", timeout="14d")

    async with engine:
        run_id = await engine.start("trial")
        await clock.advance("2d")
        assert (await engine.status(run_id)).steps["upgraded"].status == "scheduled"
        await clock.advance("11d")
        assert (await engine.status(run_id)).status == "running"  # still a day to go
        await engine.send_event(run_id, "upgraded", {"plan": "pro"})
        assert await engine.result(run_id, timeout=5) == {"plan": "pro"}
    assert clock.now() == START + timedelta(days=13)  # the event came first: no skip


async def test_without_auto_advance_time_moves_only_in_advance() -> None:
    clock = VirtualClock(START, auto_advance=False)
    engine = Engine(InMemoryStore(), clock=clock)
    _sleeper(engine, clock)
    async with engine:
        run_id = await engine.start("sleeper", 1)
        with pytest.raises(TimeoutError):
            await engine.result(run_id, timeout=0.3)  # real seconds: nothing moves time
        assert clock.now() == START
        await clock.advance("1d")
        assert await engine.result(run_id, timeout=5) == [(START + timedelta(days=1)).isoformat()]


async def test_a_run_waiting_on_the_world_holds_the_clock_still() -> None:
    # An event wait with no timeout waits on something the clock cannot bring: skipping
    # ahead meanwhile would only fire the other runs' timers before it came.
    clock = VirtualClock(START)
    engine = Engine(InMemoryStore(), clock=clock)
    _sleeper(engine, clock)

    @engine.workflow("approval")
    async def approval(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("approved")

    async with engine:
        waiting = await engine.start("approval")
        sleeping = await engine.start("sleeper", 2)
        with pytest.raises(TimeoutError):
            await engine.result(sleeping, timeout=0.3)
        assert clock.now() == START
        await engine.send_event(waiting, "approved", True)
        assert await engine.result(waiting, timeout=5) is True
        assert len(await engine.result(sleeping, timeout=5)) == 2  # now it skips
    assert clock.now() == START + timedelta(days=2)


async def test_a_callers_timeout_stays_in_real_seconds() -> None:
    clock = VirtualClock(START)
    engine = Engine(InMemoryStore(), clock=clock)

    @engine.workflow("decade")
    async def decade(ctx: WorkflowContext, data: Any) -> str:
        await ctx.sleep("wait", "3650d")
        return "done"

    async with engine:
        run_id = await engine.start("decade")
        assert await engine.result(run_id, timeout=5) == "done"  # ten virtual years
    assert clock.now() == START + timedelta(days=3650)


async def test_two_engines_on_one_clock_and_store_settle_together() -> None:
    # A client engine awaits; the serving one drives: the clock waits for the server.
    clock = VirtualClock(START)
    store = InMemoryStore()
    server, client = Engine(store, clock=clock), Engine(store, clock=clock)
    for engine in (server, client):
        _sleeper(engine, clock)
    async with server:
        run_id = await client.start("sleeper", 3)
        assert len(await client.result(run_id, timeout=5)) == 3
    assert clock.now() == START + timedelta(days=3)


def test_the_clock_imports_without_pytest() -> None:
    # A test runner of the reader's own: engine_core.testing needs no pytest.
    code = "import sys; sys.modules['pytest'] = None; from engine_core.testing import VirtualClock"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
