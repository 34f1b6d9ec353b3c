"""``Scheduler``: this process's loop that fires the stored schedules.

Any serving process may fire any schedule whose workflow it has registered; the fleet
fires each fire once because a fire is two idempotent steps, in this order:

1. start the run ``name@fire`` (with the schedule's input): the run id is the fire's,
   and a start with an id that exists starts nothing, so concurrent firers of one
   fire start one run between them;
2. move ``next_fire_at`` on with a compare-and-set on its old value
   (:meth:`~engine_core.store.Store.advance_schedule`): one firer lands it, the others
   see it moved and carry on.

A process that dies between the two leaves ``next_fire_at`` behind; the next firer
starts the same run id again (nothing) and moves it. The fires missed while no process
ran go by the schedule's ``catch_up``: "latest" (the default) starts the latest of them
only, "none" starts none (a fire more than :data:`LATE_S` late is skipped), "all"
starts each in turn, at most the last :data:`MAX_CATCH_UP` of them.

The loop sleeps until the earliest ``next_fire_at`` it knows, re-reading the schedules
at least every :data:`REREAD_S` seconds (and at once when this process creates or
resumes one), so a fire starts its run within a few milliseconds of its time. A store
outage is waited out like every other loop's (:mod:`engine_core.common.outages`). A process
judges "due" by its own clock: a host whose clock runs ahead starts a fire's run that
much early (never twice).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

from engine_core.common.clock import Clock
from engine_core.common.outages import Outages
from engine_core.common.periodic import Periodic
from engine_core.errors import StoreUnavailableError
from engine_core.records import ScheduleRecord
from engine_core.schedules.times import (
    ScheduleSpec,
    fire_run_id,
    latest_fire,
    next_fire,
)
from engine_core.store import Store

log = logging.getLogger("engine_core.schedules.scheduler")

#: The longest the loop sleeps before it reads the schedules again (seconds).
REREAD_S = 1.0

#: With ``catch_up="none"``, a fire this late (seconds) was missed: it starts no run.
LATE_S = 60.0
#: With ``catch_up="all"``, at most this many missed fires start runs (the latest).
MAX_CATCH_UP = 100
#: ... found by stepping at most this many fires forward from the oldest missed one.
_MAX_STEPS = 10_000

#: ``await start_run(workflow, input, run_id)``: start a run (idempotent by run id).
StartRun = Callable[[str, Any, str], Awaitable[Any]]


def spec_of(schedule: ScheduleRecord) -> ScheduleSpec:
    """The timing of ``schedule``."""
    return ScheduleSpec(cron=schedule.cron, every=schedule.every, timezone=schedule.timezone)


class Scheduler:
    """Fires the schedules of the workflows ``workflows()`` names, by ``start_run``."""

    def __init__(
        self,
        store: Store,
        outages: Outages,
        workflows: Callable[[], Sequence[str]],
        start_run: StartRun,
        clock: Clock,
    ) -> None:
        self.store = store
        self.outages = outages
        self.workflows = workflows
        self.start_run = start_run
        self.clock = clock
        self._loop = Periodic(
            "the schedule loop", self.tick, every=REREAD_S, outages=outages, clock=clock
        )
        #: How many fires this process has started runs for.
        self.fired = 0

    def start(self) -> None:
        """Start firing schedules due."""
        self._loop.start()

    async def stop(self) -> None:
        """Stop firing schedules."""
        await self._loop.stop()

    @property
    def busy(self) -> bool:
        """Whether a look at the schedules runs now or is about to."""
        return self._loop.busy

    def wake(self) -> None:
        """Read the schedules again now (one was created or resumed here)."""
        self._loop.wake()

    async def tick(self) -> float:
        """Fire what is due; the seconds until the next look."""
        registered = set(self.workflows())
        earliest: datetime | None = None
        for schedule in await self.store.list_schedules():
            if schedule.paused or schedule.workflow not in registered:
                continue
            due = schedule.next_fire_at
            if due <= self.clock.now():
                due = await self.fire(schedule)
            if earliest is None or due < earliest:
                earliest = due
        if earliest is None:
            return REREAD_S
        # Woken by the clock then, too: a virtual clock moves to it only when told.
        self._loop.wake_at(earliest)
        return min(REREAD_S, max(0.0, (earliest - self.clock.now()).total_seconds()))

    async def fire(self, schedule: ScheduleRecord) -> datetime:
        """Start the run of the schedule's latest fire, then move its ``next_fire_at``
        on; returns the next fire."""
        spec = spec_of(schedule)
        now = self.clock.now()
        fire = latest_fire(spec, now)
        if fire is None or fire < schedule.next_fire_at:
            fire = schedule.next_fire_at
        skip = False
        if schedule.catch_up == "all":
            fire = _oldest_kept(spec, schedule.next_fire_at, now)
        elif schedule.catch_up == "none":
            skip = (now - fire).total_seconds() > LATE_S
        run_id = fire_run_id(schedule.name, fire)
        try:
            if not skip:
                await self.start_run(schedule.workflow, schedule.input, run_id)
                self.fired += 1
        except (asyncio.CancelledError, StoreUnavailableError):
            raise
        except Exception:
            # A start that can never succeed (its run id taken by another workflow's
            # run) must not stop the schedule: this fire is given up.
            log.exception("schedule %r could not start run %r", schedule.name, run_id)
        upcoming = next_fire(spec, fire if schedule.catch_up == "all" else max(now, fire))
        await self.store.advance_schedule(
            schedule.name, expect=schedule.next_fire_at, next_fire_at=upcoming
        )
        return upcoming


def _oldest_kept(spec: ScheduleSpec, oldest: datetime, now: datetime) -> datetime:
    """The first missed fire that ``catch_up="all"`` starts: the oldest of the last
    :data:`MAX_CATCH_UP` fires from ``oldest`` to ``now``."""
    kept: deque[datetime] = deque([oldest], maxlen=MAX_CATCH_UP)
    fire = oldest
    for _ in range(_MAX_STEPS):
        fire = next_fire(spec, fire)
        if fire > now:
            break
        kept.append(fire)
    else:  # too many to step through: the last ones, counted back from now
        latest = latest_fire(spec, now)
        return latest if latest is not None else oldest
    return kept[0]
