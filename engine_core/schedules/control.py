"""Schedules as the client API sees them: create, pause, resume, delete and list
(the firing is :mod:`engine_core.schedules.scheduler`'s)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from engine_core.common.clock import Clock
from engine_core.common.durations import Duration
from engine_core.common.values import MAX_RUN_ID_LENGTH, check_name, to_stored
from engine_core.errors import InvalidNameError, ScheduleNotFoundError
from engine_core.flow.starts import check_registered
from engine_core.records import ScheduleRecord
from engine_core.schedules.scheduler import spec_of
from engine_core.schedules.times import RUN_ID_SUFFIX_LENGTH, Schedule, make_spec, next_fire
from engine_core.store import Store


class ScheduleControl:
    """Stores and steers schedules for the Engine, timed by its ``clock``."""

    def __init__(
        self,
        store: Store,
        workflows: Mapping[str, Any],
        changed: Callable[[], None],
        clock: Clock,
    ) -> None:
        self._store = store
        self._workflows = workflows
        self._changed = changed
        self._clock = clock

    async def create_schedule(
        self,
        name: str,
        workflow: str,
        *,
        cron: str | None = None,
        every: Duration | None = None,
        timezone: str = "UTC",
        input: Any = None,
    ) -> Schedule:
        """``Engine.create_schedule``: check everything, then store it whole."""
        check_name(name, "schedule name")
        if len(name) + RUN_ID_SUFFIX_LENGTH > MAX_RUN_ID_LENGTH:
            raise InvalidNameError(
                f"a schedule name must be at most {MAX_RUN_ID_LENGTH - RUN_ID_SUFFIX_LENGTH} "
                f"characters (its run ids add {RUN_ID_SUFFIX_LENGTH}), got {len(name)}"
            )
        check_name(workflow, "workflow name")
        check_registered(self._workflows, workflow)
        spec = make_spec(cron, every, timezone)
        stored = to_stored(input, f"input of schedule {name!r}")
        now = self._clock.now()
        existing = await self._store.get_schedule(name)
        record = ScheduleRecord(
            name=name,
            workflow=workflow,
            cron=spec.cron,
            every=spec.every,
            timezone=spec.timezone,
            input=stored,
            paused=False,
            next_fire_at=next_fire(spec, now),
            created_at=existing.created_at if existing is not None else now,
            updated_at=now,
        )
        await self._store.put_schedule(record)
        self._changed()
        return schedule_of(record)

    async def get(self, name: str) -> ScheduleRecord:
        """The stored schedule, or :class:`ScheduleNotFoundError`."""
        check_name(name, "schedule name")
        found = await self._store.get_schedule(name)
        if found is None:
            raise ScheduleNotFoundError(f"no schedule is named {name!r}")
        return found

    async def pause_schedule(self, name: str) -> None:
        """Stop the schedule firing until :meth:`resume_schedule`."""
        check_name(name, "schedule name")
        paused = await self._store.set_schedule_paused(name, True, updated_at=self._clock.now())
        if paused is None:
            raise ScheduleNotFoundError(f"no schedule is named {name!r}")

    async def resume_schedule(self, name: str) -> None:
        """Let a paused schedule fire again, from its next fire after now (the fires
        it missed while paused are not made up)."""
        check_name(name, "schedule name")
        found = await self._store.get_schedule(name)
        if found is None:
            raise ScheduleNotFoundError(f"no schedule is named {name!r}")
        if not found.paused:
            return
        now = self._clock.now()
        resumed = await self._store.set_schedule_paused(
            name, False, next_fire_at=next_fire(spec_of(found), now), updated_at=now
        )
        if resumed is None:
            raise ScheduleNotFoundError(f"no schedule is named {name!r}")
        self._changed()

    async def delete_schedule(self, name: str) -> None:
        """Delete the schedule; the runs it started are not touched."""
        check_name(name, "schedule name")
        if not await self._store.delete_schedule(name):
            raise ScheduleNotFoundError(f"no schedule is named {name!r}")

    async def list_schedules(self) -> list[Schedule]:
        """Every stored schedule, sorted by name (registered on this engine or not)."""
        return [schedule_of(record) for record in await self._store.list_schedules()]


def schedule_of(record: ScheduleRecord) -> Schedule:
    """The public view of a stored schedule."""
    return Schedule(
        name=record.name,
        workflow=record.workflow,
        cron=record.cron,
        every=record.every,
        timezone=record.timezone,
        input=record.input,
        paused=record.paused,
        next_fire_at=record.next_fire_at,
        catch_up=record.catch_up,
    )
