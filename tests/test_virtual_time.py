"""The engine's features on a ``VirtualClock`` (docs/guides/testing.md): event timeouts,
retry delays (fixed and exponential), delayed starts, deadlines, schedules (``every``
and ``cron``, their runs named for their virtual fire times), leases and recorded
timestamps all follow it, each firing at its virtual time and never before. Virtual
time needs the in-memory store (a MongoStore refuses it: ``test_clock.py``); the clock
itself: ``test_virtual_clock.py``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engine_core import Engine, WorkflowContext, WorkflowDeadlineExceededError
from engine_core.memory import InMemoryStore
from engine_core.testing import VirtualClock

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _on_clock(**options: Any) -> tuple[Engine, VirtualClock]:
    clock = VirtualClock(START)
    return Engine(InMemoryStore(), clock=clock, **options), clock


async def test_an_event_wait_times_out_at_its_virtual_time() -> None:
    engine, clock = _on_clock()

    @engine.workflow("trial")
    async def trial(ctx: WorkflowContext, data: Any) -> str:
        upgraded = await ctx.wait_for_event("upgraded", timeout="3d")
        return "kept" if upgraded is not None else f"lapsed at {clock.now().isoformat()}"

    async with engine:
        run_id = await engine.start("trial")
        await clock.advance(timedelta(days=3) - timedelta(seconds=1))
        assert (await engine.status(run_id)).status == "running"  # a second to go
        lapsed = (START + timedelta(days=3)).isoformat()
        assert await engine.result(run_id, timeout=10) == f"lapsed at {lapsed}"


async def test_retry_delays_wait_virtual_time_fixed_and_exponential() -> None:
    engine, clock = _on_clock()
    tries: dict[str, list[datetime]] = {"fixed": [], "exponential": []}

    async def charge(kind: str) -> str:
        tries[kind].append(clock.now())
        if len(tries[kind]) < 4:
            raise RuntimeError("card declined")
        return "paid"

    @engine.workflow("billing")
    async def billing(ctx: WorkflowContext, data: Any) -> list[str]:
        return [
            await ctx.step("fixed", charge, "fixed", retries=3, retry_delay="1h"),
            await ctx.step("exp", charge, "exponential", retries=3, retry_delay="exponential"),
        ]

    async with engine:
        run_id = await engine.start("billing")
        assert await engine.result(run_id, timeout=10) == ["paid", "paid"]
    assert tries["fixed"] == [START + timedelta(hours=h) for h in range(4)]
    gaps = [b - a for a, b in zip(tries["exponential"], tries["exponential"][1:], strict=False)]
    # Full jitter under a ceiling that doubles: 1 s, 2 s, 4 s, all in virtual time.
    assert len(gaps) == 3 and all(g <= timedelta(seconds=2**i) for i, g in enumerate(gaps))


async def test_a_dispatched_steps_retries_wait_virtual_time() -> None:
    engine, clock = _on_clock(always_replay=True)
    tries: list[datetime] = []

    @engine.step_function("sync-crm")
    async def sync_crm(payload: dict[str, str]) -> str:
        tries.append(clock.now())
        if len(tries) < 3:
            raise RuntimeError("the CRM is down")
        return payload["user"]

    @engine.workflow("onboard")
    async def onboard(ctx: WorkflowContext, data: Any) -> str:
        await ctx.sleep("grace", "5d")
        return await ctx.dispatch("sync", "sync-crm", {"user": "ada"}, retries=3, retry_delay="1h")

    async with engine:
        run_id = await engine.start("onboard")
        assert await engine.result(run_id, timeout=10) == "ada"
    assert tries == [START + timedelta(days=5, hours=h) for h in range(3)]


async def test_a_delayed_start_begins_at_its_virtual_time() -> None:
    engine, clock = _on_clock()

    @engine.workflow("welcome")
    async def welcome(ctx: WorkflowContext, data: Any) -> datetime:
        return await ctx.step("now", _now_of, clock)

    async with engine:
        run_id = await engine.start("welcome", delay="2d")
        await clock.advance("1d")
        status = await engine.status(run_id)
        assert status.status == "queued" and status.not_before == START + timedelta(days=2)
        assert await engine.result(run_id, timeout=10) == START + timedelta(days=2)


async def _now_of(clock: VirtualClock) -> datetime:
    return clock.now()


async def test_a_deadline_cancels_the_run_at_its_virtual_time() -> None:
    engine, clock = _on_clock()

    @engine.workflow("slow")
    async def slow(ctx: WorkflowContext, data: Any) -> str:
        await ctx.sleep("long", "1d")
        return "done"

    async with engine:
        run_id = await engine.start("slow", deadline="1h")
        with pytest.raises(WorkflowDeadlineExceededError):
            await engine.result(run_id, timeout=10)
        status = await engine.status(run_id)
    assert status.deadline_at == START + timedelta(hours=1)
    assert status.updated_at == START + timedelta(hours=1) == clock.now()


@pytest.mark.parametrize(
    ("timing", "fires"),
    [
        ({"every": "1d"}, ["2026-03-02T00:00:00Z", "2026-03-03T00:00:00Z"]),
        ({"cron": "30 9 * * *"}, ["2026-03-02T09:30:00Z", "2026-03-03T09:30:00Z"]),
    ],
)
async def test_schedules_fire_at_virtual_times_and_name_runs_for_them(
    timing: dict[str, str], fires: list[str]
) -> None:
    engine, clock = _on_clock()
    began: list[datetime] = []

    @engine.workflow("report")
    async def report(ctx: WorkflowContext, data: Any) -> None:
        began.append(await ctx.step("at", _now_of, clock))

    engine.schedule("daily", "report", **timing)
    async with engine:
        await clock.advance("2d")
        runs = await engine.list_runs("report")
    assert sorted(r.run_id for r in runs) == [f"daily@{fire}" for fire in fires]
    assert sorted(began) == [datetime.fromisoformat(f) for f in fires]
    assert all(r.status == "completed" for r in runs)


async def test_a_lease_expires_in_virtual_time() -> None:
    clock = VirtualClock(START)
    store = InMemoryStore()
    engine = Engine(store, clock=clock, lease_ttl="30s")

    @engine.workflow("noop")
    async def noop(ctx: WorkflowContext, data: Any) -> int:
        return 1

    run_id = await engine.start("noop")  # recorded; nothing serves it yet
    held = await store.begin_pass(run_id, holder="a-process-that-died", ttl=30.0)
    assert held is not None
    assert await store.begin_pass(run_id, holder="another", ttl=30.0) is None  # still held
    await clock.advance("31s")
    taken = await store.begin_pass(run_id, holder="another", ttl=30.0)
    assert taken is not None and taken.lease_expires_at == START + timedelta(seconds=61)
