"""Conformance cases for schedules."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from engine_core.records import ScheduleRecord
from engine_core.store import Store

_T0 = datetime(2026, 12, 3, 1, 0, tzinfo=UTC)


def make_schedule(name: str = "nightly", **changes: Any) -> ScheduleRecord:
    """A schedule ``name`` (``changes``: its fields that differ from a nightly report)."""
    fields: dict[str, Any] = {
        "name": name,
        "workflow": "report",
        "cron": "0 3 * * *",
        "every": None,
        "timezone": "Europe/Helsinki",
        "input": {"kind": "daily", "$set": {"a.b": [1, None]}},
        "paused": False,
        "next_fire_at": _T0,
        "created_at": _T0 - timedelta(days=1, microseconds=7),
        "updated_at": _T0 - timedelta(hours=1, microseconds=3),
    }
    fields.update(changes)
    return ScheduleRecord(**fields)


class ScheduleCases:
    """What a store must do with schedules."""

    async def test_schedules_round_trip_and_replace(self, store: Store) -> None:
        """Schedules round trip and replace."""
        assert await store.get_schedule("nightly") is None
        assert await store.list_schedules() == []
        first = make_schedule()
        await store.put_schedule(first)
        assert await store.get_schedule("nightly") == first
        again = make_schedule(
            cron=None,
            every=30.0,
            timezone="UTC",
            input=None,
            paused=True,
            next_fire_at=_T0 + timedelta(microseconds=1),
        )
        await store.put_schedule(again)
        assert await store.get_schedule("nightly") == again
        assert await store.list_schedules() == [again]

    async def test_schedules_are_listed_by_name(self, store: Store) -> None:
        """Schedules are listed by name."""
        names = ["b", "a", "a\x00z", "$where", "a.b", "Z", "ä"]
        for name in names:
            await store.put_schedule(make_schedule(name, workflow=f"wf-{name}"))
        listed = await store.list_schedules()
        assert [s.name for s in listed] == sorted(names)
        assert all(s.workflow == f"wf-{s.name}" for s in listed)
        got = await store.get_schedule("a\x00z")
        assert got is not None and got.name == "a\x00z"

    async def test_delete_schedule(self, store: Store) -> None:
        """Delete schedule."""
        await store.put_schedule(make_schedule("x"))
        await store.put_schedule(make_schedule("y"))
        assert await store.delete_schedule("x") is True
        assert await store.delete_schedule("x") is False
        assert await store.get_schedule("x") is None
        assert [s.name for s in await store.list_schedules()] == ["y"]

    async def test_set_schedule_paused(self, store: Store) -> None:
        """Set schedule paused."""
        later = _T0 + timedelta(hours=5)
        assert await store.set_schedule_paused("nope", True, updated_at=later) is None
        await store.put_schedule(make_schedule())
        paused = await store.set_schedule_paused("nightly", True, updated_at=later)
        assert paused is not None and paused.paused is True
        assert paused.updated_at == later and paused.next_fire_at == _T0
        moved = _T0 + timedelta(days=2)
        resumed = await store.set_schedule_paused(
            "nightly", False, next_fire_at=moved, updated_at=later
        )
        assert resumed is not None and resumed.paused is False and resumed.next_fire_at == moved
        assert await store.get_schedule("nightly") == resumed

    async def test_advance_schedule_is_a_compare_and_set(self, store: Store) -> None:
        """Advance schedule is a compare and set."""
        nxt = _T0 + timedelta(days=1)
        assert not await store.advance_schedule("nightly", expect=_T0, next_fire_at=nxt)
        await store.put_schedule(make_schedule())
        off_by_a_microsecond = _T0 + timedelta(microseconds=1)
        assert not await store.advance_schedule(
            "nightly", expect=off_by_a_microsecond, next_fire_at=nxt
        )
        assert await store.advance_schedule("nightly", expect=_T0, next_fire_at=nxt)
        assert not await store.advance_schedule("nightly", expect=_T0, next_fire_at=nxt)
        got = await store.get_schedule("nightly")
        assert got is not None and got.next_fire_at == nxt and got.cron == "0 3 * * *"
        assert got.input == make_schedule().input and got.created_at == make_schedule().created_at

    async def test_concurrent_advances_with_one_expectation_land_once(self, store: Store) -> None:
        """Concurrent advances with one expectation land once."""
        await store.put_schedule(make_schedule())
        targets = [_T0 + timedelta(seconds=i + 1) for i in range(16)]
        won = await asyncio.gather(
            *(store.advance_schedule("nightly", expect=_T0, next_fire_at=t) for t in targets)
        )
        assert sum(won) == 1
        got = await store.get_schedule("nightly")
        assert got is not None and got.next_fire_at == targets[won.index(True)]
