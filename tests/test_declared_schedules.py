"""Schedules declared in code: the code owns the specification, the operator owns
``paused``; missed fires go by ``catch_up``; ``trigger_schedule`` fires one now."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engine_core import Engine, InvalidOptionError, ScheduleNotFoundError, WorkflowContext


def with_report(engine: Engine) -> Engine:
    @engine.workflow("report")
    async def report(ctx: WorkflowContext, data: Any) -> Any:
        return data

    return engine


async def runs_of(engine: Engine, name: str) -> list[str]:
    return [r.run_id for r in await engine.list_runs(prefix=f"{name}@", order="id")]


async def wait_for_runs(engine: Engine, name: str, count: int) -> list[str]:
    for _ in range(100):
        found = await runs_of(engine, name)
        if len(found) >= count:
            return found
        await asyncio.sleep(0.1)
    return await runs_of(engine, name)


async def test_the_code_owns_the_spec_and_the_operator_owns_paused(
    make_engine: Callable[..., Engine],
) -> None:
    first = with_report(make_engine())
    first.schedule("nightly", "report", cron="0 3 * * *", input={"v": 1})
    async with first:
        [stored] = await first.list_schedules()
        assert (stored.cron, stored.input, stored.paused) == ("0 3 * * *", {"v": 1}, False)
        await first.pause_schedule("nightly")
    # A restart with a changed specification: the spec is the code's, paused stays.
    second = with_report(make_engine())
    second.schedule("nightly", "report", cron="0 4 * * *", input={"v": 2}, catch_up="none")
    async with second:
        [stored] = await second.list_schedules()
    assert (stored.cron, stored.input, stored.catch_up) == ("0 4 * * *", {"v": 2}, "none")
    assert stored.paused is True
    with pytest.raises(RuntimeError, match="before `async with engine`"):
        async with second:
            second.schedule("late", "report", every=60)


async def _missed(
    make_engine: Callable[..., Engine], catch_up: str
) -> tuple[list[str], list[datetime]]:
    """A daily schedule whose last three fires and today's were missed."""
    first = with_report(make_engine())
    first.schedule("daily", "report", every="1d", catch_up=catch_up)
    async with first:
        pass
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    missed = [today - timedelta(days=n) for n in (3, 2, 1, 0)]
    [stored] = await first.list_schedules()
    assert await first.store.advance_schedule(
        "daily", expect=stored.next_fire_at, next_fire_at=missed[0]
    )
    restarted = with_report(make_engine())
    restarted.schedule("daily", "report", every="1d", catch_up=catch_up)
    async with restarted:
        expected = {"latest": 1, "all": 4, "none": 0}[catch_up]
        found = await wait_for_runs(restarted, "daily", expected)
        await asyncio.sleep(0.3)  # and no more
        found = await runs_of(restarted, "daily")
        [stored] = await restarted.list_schedules()
    assert stored.next_fire_at > datetime.now(UTC)
    return found, missed


def _id(fire: datetime) -> str:
    return f"daily@{fire:%Y-%m-%dT%H:%M:%SZ}"


async def test_catch_up_latest_starts_one_run_for_the_missed_fires(
    make_engine: Callable[..., Engine],
) -> None:
    found, missed = await _missed(make_engine, "latest")
    assert found == [_id(missed[-1])]


async def test_catch_up_all_starts_each_missed_fire(make_engine: Callable[..., Engine]) -> None:
    found, missed = await _missed(make_engine, "all")
    assert found == [_id(m) for m in missed]


async def test_catch_up_none_starts_no_missed_fire(make_engine: Callable[..., Engine]) -> None:
    found, missed = await _missed(make_engine, "none")
    assert not set(found) & {_id(m) for m in missed[:-1]}


async def test_trigger_fires_now_paused_or_not(make_engine: Callable[..., Engine]) -> None:
    engine = with_report(make_engine())
    engine.schedule("nightly", "report", cron="0 3 * * *", input={"k": 1})
    async with engine:
        await engine.pause_schedule("nightly")
        run_id = await engine.trigger_schedule("nightly")
        assert run_id.startswith("nightly@manual-") and len(run_id) == len(
            "nightly@2026-12-03T01:00:00Z"
        )
        assert await engine.result(run_id, timeout=10) == {"k": 1}
        # A client that registered nothing records the run for the fleet to drive.
        client = make_engine()
        other = await client.trigger_schedule("nightly")
        assert other != run_id
        assert await engine.result(other, timeout=10) == {"k": 1}
        with pytest.raises(ScheduleNotFoundError):
            await client.trigger_schedule("nope")


def test_bad_catch_up_says_what_to_pass(make_engine: Callable[..., Engine]) -> None:
    engine = with_report(make_engine())
    with pytest.raises(InvalidOptionError, match="catch_up must be one of 'latest', 'none'"):
        engine.schedule("s", "report", every=60, catch_up="sometimes")
