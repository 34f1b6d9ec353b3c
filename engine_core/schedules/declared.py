"""Schedules declared in code (``engine.schedule``): the code owns the specification,
the operator owns ``paused``.

When an engine starts serving, each declared schedule is stored if it is missing, or
its specification (workflow, timing, time zone, input, ``catch_up``) is written over
the stored one where they differ, keeping ``paused`` and, when the timing is the same,
``next_fire_at`` (so a fire missed during a restart is caught up as ``catch_up``
says). A restart never resumes a schedule an operator paused.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from engine_core.common.clock import Clock
from engine_core.common.durations import Duration
from engine_core.common.options import check_catch_up
from engine_core.common.values import MAX_RUN_ID_LENGTH, check_name, to_stored
from engine_core.errors import InvalidNameError
from engine_core.records import ScheduleRecord
from engine_core.schedules.times import (
    RUN_ID_SUFFIX_LENGTH,
    ScheduleSpec,
    make_spec,
    next_fire,
)
from engine_core.store import Store


@dataclass(frozen=True)
class DeclaredSchedule:
    """A schedule as the code declares it, checked."""

    name: str
    workflow: str
    spec: ScheduleSpec
    input: Any
    catch_up: str


def check_schedule_name(name: str) -> None:
    """``name`` checked as a schedule's: a name whose run ids (name and fire time) fit."""
    check_name(name, "schedule name")
    if len(name) + RUN_ID_SUFFIX_LENGTH > MAX_RUN_ID_LENGTH:
        raise InvalidNameError(
            f"a schedule name must be at most {MAX_RUN_ID_LENGTH - RUN_ID_SUFFIX_LENGTH} "
            f"characters (its run ids add {RUN_ID_SUFFIX_LENGTH}), got {len(name)}"
        )


def declare_schedule(
    name: str,
    workflow: str,
    *,
    cron: str | None,
    every: Duration | None,
    timezone: str,
    input: Any,
    catch_up: str,
) -> DeclaredSchedule:
    """Everything checked at the call: the name, the timing, the input, ``catch_up``."""
    check_schedule_name(name)
    check_name(workflow, "workflow name")
    return DeclaredSchedule(
        name=name,
        workflow=workflow,
        spec=make_spec(cron, every, timezone),
        input=to_stored(input, f"input of schedule {name!r}"),
        catch_up=check_catch_up(catch_up),
    )


async def store_declared(store: Store, declared: dict[str, DeclaredSchedule], clock: Clock) -> bool:
    """Store what the code declares where the store differs (stamped and timed by
    ``clock``, the engine's); whether anything changed."""
    changed = False
    for d in declared.values():
        now = clock.now()
        stored = await store.get_schedule(d.name)
        wanted = ScheduleRecord(
            name=d.name,
            workflow=d.workflow,
            cron=d.spec.cron,
            every=d.spec.every,
            timezone=d.spec.timezone,
            input=d.input,
            paused=False,
            next_fire_at=next_fire(d.spec, now),
            created_at=now,
            updated_at=now,
            catch_up=d.catch_up,
        )
        if stored is None:
            await store.put_schedule(wanted)
            changed = True
            continue
        if _spec(stored) == _spec(wanted):
            continue
        same_timing = (stored.cron, stored.every, stored.timezone) == (
            wanted.cron,
            wanted.every,
            wanted.timezone,
        )
        await store.put_schedule(
            replace(
                wanted,
                paused=stored.paused,  # the operator's
                next_fire_at=stored.next_fire_at if same_timing else wanted.next_fire_at,
                created_at=stored.created_at,
            )
        )
        changed = True
    return changed


def _spec(record: ScheduleRecord) -> tuple[Any, ...]:
    return (
        record.workflow,
        record.cron,
        record.every,
        record.timezone,
        record.input,
        record.catch_up,
    )
