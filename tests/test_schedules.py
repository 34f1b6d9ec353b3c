"""Schedules through the Engine API, on the in-memory store and on MongoStore."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from engine_core import (
    Engine,
    InvalidNameError,
    InvalidScheduleError,
    NotSerializableError,
    Schedule,
    ScheduleNotFoundError,
    StoreUnavailableError,
    WorkflowContext,
    WorkflowNotRegisteredError,
)
from engine_core.common.clock import utcnow
from engine_core.memory import InMemoryStore
from engine_core.schedules.times import fire_run_id, make_spec, next_fire


def _register(engine: Engine, seen: list[Any] | None = None) -> None:
    @engine.workflow("report")
    async def report(ctx: WorkflowContext, data: Any) -> Any:
        if seen is not None:
            seen.append(data)
        return data


async def _runs_of(engine: Engine, name: str) -> list[str]:
    return [r.run_id for r in await engine.list_runs(prefix=f"{name}@", limit=1000, order="id")]


async def _wait_for_runs(engine: Engine, name: str, count: int, timeout: float = 5) -> list[str]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        runs = await _runs_of(engine, name)
        if len(runs) >= count or asyncio.get_running_loop().time() > deadline:
            return runs
        await asyncio.sleep(0.02)


async def test_create_list_replace_pause_resume_delete(engine: Engine) -> None:
    _register(engine)
    before = utcnow()
    made = await engine.create_schedule(
        "nightly", "report", cron="0 3 * * *", timezone="Europe/Helsinki", input={"kind": "daily"}
    )
    assert isinstance(made, Schedule)
    assert (made.name, made.workflow, made.cron) == ("nightly", "report", "0 3 * * *")
    assert made.every is None
    assert made.timezone == "Europe/Helsinki" and made.input == {"kind": "daily"}
    assert made.paused is False and made.next_fire_at > before
    assert made.next_fire_at.utcoffset() == timedelta(0)
    local = made.next_fire_at.astimezone(ZoneInfo("Europe/Helsinki"))
    assert (local.hour, local.minute) == (3, 0)
    await engine.create_schedule("a-first", "report", every="30s")
    assert [s.name for s in await engine.list_schedules()] == ["a-first", "nightly"]
    with pytest.raises(AttributeError):
        made.paused = True  # type: ignore[misc]

    replaced = await engine.create_schedule("nightly", "report", every="1h", input=[1, 2])
    assert (replaced.cron, replaced.every, replaced.timezone) == (None, 3600.0, "UTC")
    assert replaced.next_fire_at.timestamp() % 3600 == 0
    listed = {s.name: s for s in await engine.list_schedules()}
    assert listed["nightly"] == replaced

    await engine.pause_schedule("nightly")
    assert {s.name: s for s in await engine.list_schedules()}["nightly"].paused is True
    await engine.resume_schedule("nightly")
    resumed = {s.name: s for s in await engine.list_schedules()}["nightly"]
    assert resumed.paused is False and resumed.next_fire_at > utcnow()
    await engine.resume_schedule("nightly")  # resuming a running schedule changes nothing

    await engine.delete_schedule("nightly")
    assert [s.name for s in await engine.list_schedules()] == ["a-first"]
    for call in (engine.pause_schedule, engine.resume_schedule, engine.delete_schedule):
        with pytest.raises(ScheduleNotFoundError) as caught:
            await call("nightly")
        assert isinstance(caught.value, LookupError)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"cron": "0 3 * * *", "every": "1s"},
        {"cron": "0 25 * * *"},
        {"cron": "* * * * *", "timezone": "Europe/Atlantis"},
        {"every": "0s"},
        {"every": -5},
        {"every": "never"},
    ],
)
async def test_bad_timings_raise_and_store_nothing(engine: Engine, kwargs: dict[str, Any]) -> None:
    _register(engine)
    with pytest.raises(InvalidScheduleError) as caught:
        await engine.create_schedule("bad", "report", **kwargs)
    assert isinstance(caught.value, ValueError)
    assert await engine.list_schedules() == []


async def test_bad_names_workflows_and_inputs_raise(engine: Engine) -> None:
    _register(engine)
    with pytest.raises(WorkflowNotRegisteredError):
        await engine.create_schedule("s", "nope", every="1s")
    with pytest.raises(InvalidNameError):
        await engine.create_schedule("", "report", every="1s")
    with pytest.raises(InvalidNameError):
        await engine.create_schedule(5, "report", every="1s")  # type: ignore[arg-type]
    with pytest.raises(InvalidNameError):
        await engine.create_schedule("x" * 190, "report", every="1s")
    with pytest.raises(NotSerializableError):
        await engine.create_schedule("s", "report", every="1s", input={"when": object()})
    with pytest.raises(InvalidNameError):
        await engine.pause_schedule(None)  # type: ignore[arg-type]
    assert await engine.list_schedules() == []


async def test_an_every_schedule_starts_its_fires_runs_with_its_input(engine: Engine) -> None:
    seen: list[Any] = []
    _register(engine, seen)
    made = await engine.create_schedule("tick", "report", every="1s", input={"n": 7})
    async with engine:
        runs = await _wait_for_runs(engine, "tick", 1)
        assert runs, "the schedule did not fire"
        assert runs[0] == fire_run_id("tick", made.next_fire_at)
        assert await engine.result(runs[0], timeout=5) == {"n": 7}
        runs = await _wait_for_runs(engine, "tick", 2)
    assert runs[1] == fire_run_id("tick", made.next_fire_at + timedelta(seconds=1))
    assert seen[:2] == [{"n": 7}, {"n": 7}]
    status = await engine.status(runs[0])
    lag = (status.created_at - made.next_fire_at).total_seconds()
    assert 0 <= lag < 0.5, f"the run was recorded {lag:.3f} s after its fire"
    after = {s.name: s for s in await engine.list_schedules()}["tick"]
    assert after.next_fire_at > made.next_fire_at


async def test_a_paused_schedule_does_not_fire_and_resumes_from_now(engine: Engine) -> None:
    _register(engine)
    await engine.create_schedule("quiet", "report", every="1s")
    await engine.pause_schedule("quiet")
    async with engine:
        await asyncio.sleep(1.3)
        assert await _runs_of(engine, "quiet") == []
        resumed_at = utcnow()
        await engine.resume_schedule("quiet")
        runs = await _wait_for_runs(engine, "quiet", 1)
    assert len(runs) >= 1
    first = datetime.strptime(runs[0].split("@")[1], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert first > resumed_at - timedelta(seconds=1)


async def test_missed_fires_collapse_into_the_latest(engine: Engine) -> None:
    _register(engine)
    await engine.create_schedule("late", "report", every="1s")
    # As if no process had run for a minute: next_fire_at is long past.
    record = await engine.store.get_schedule("late")
    assert record is not None
    record.next_fire_at = next_fire(make_spec(every="1s"), utcnow() - timedelta(seconds=60))
    await engine.store.put_schedule(record)
    began = utcnow()
    async with engine:
        runs = await _wait_for_runs(engine, "late", 1)
        await asyncio.sleep(0.2)
        runs = await _runs_of(engine, "late")
    ended = utcnow()
    fires = sorted(
        datetime.strptime(r.split("@")[1], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC) for r in runs
    )
    # The minute of missed fires made one run, the latest; on a busy machine the
    # regular fires of the seconds served after it may follow, one each.
    assert began - timedelta(seconds=1) <= fires[0] <= ended, runs
    assert fires == [fires[0] + timedelta(seconds=i) for i in range(len(fires))], runs
    assert len(fires) <= (ended - began).total_seconds() + 2, runs


async def test_only_processes_that_registered_the_workflow_fire_it(
    make_engine: Callable[..., Engine],
) -> None:
    owner = make_engine()
    _register(owner)
    other = make_engine()

    @other.workflow("something-else")
    async def something_else(ctx: WorkflowContext, data: Any) -> None:
        return None

    await owner.create_schedule("owned", "report", every="1s")
    async with other:
        await asyncio.sleep(1.3)
        assert await _runs_of(other, "owned") == []
    async with owner:
        assert await _wait_for_runs(owner, "owned", 1)


class FlakyStore:
    """An in-memory store whose schedule reads fail (the store is away) ``outages``
    times, then answer."""

    def __init__(self, inner: InMemoryStore, outages: int) -> None:
        self._inner = inner
        self.outages = outages

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def list_schedules(self) -> Any:
        if self.outages > 0:
            self.outages -= 1
            raise StoreUnavailableError("the store is away")
        return await self._inner.list_schedules()


async def test_the_scheduler_waits_out_a_store_outage() -> None:
    flaky = FlakyStore(InMemoryStore(), outages=2)
    engine = Engine(flaky, lease_ttl="5s")  # type: ignore[arg-type]
    _register(engine)
    await engine.create_schedule("steady", "report", every="1s")
    async with engine:
        runs = await _wait_for_runs(engine, "steady", 1, timeout=6)
    assert flaky.outages == 0 and len(runs) >= 1
