"""The store protocol's schedules, the registry of serving engines, and the counts an
operator reads."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from engine_core.records import (
    ScheduleRecord,
    Worker,
)


class FleetStore(Protocol):
    """Schedules, the registry of serving engines, and counts for operators (part of
    :class:`~engine_core.store.Store`)."""

    # ---- schedules --------------------------------------------------------------

    async def put_schedule(self, schedule: ScheduleRecord) -> None:
        """Store ``schedule`` whole under its name, replacing any schedule of that name
        (an upsert: repeating it is harmless)."""

    async def get_schedule(self, name: str) -> ScheduleRecord | None:
        """The schedule of this name, or None."""

    async def list_schedules(self) -> list[ScheduleRecord]:
        """Every schedule, ordered by name."""

    async def delete_schedule(self, name: str) -> bool:
        """Delete the schedule of this name; whether one was there. (A repeat after a
        lost reply may say False for a delete that landed.)"""

    async def set_schedule_paused(
        self,
        name: str,
        paused: bool,
        *,
        next_fire_at: datetime | None = None,
        updated_at: datetime,
    ) -> ScheduleRecord | None:
        """Set the schedule's ``paused`` flag and ``updated_at`` (and, when given, its
        ``next_fire_at``) in one write; the schedule as it is now, or None when no
        schedule has this name."""

    async def advance_schedule(
        self, name: str, *, expect: datetime, next_fire_at: datetime
    ) -> bool:
        """Move the schedule's ``next_fire_at`` from ``expect`` to ``next_fire_at``,
        only if it is still ``expect`` (compared exactly, to the microsecond), atomically:
        of any number of concurrent calls with the same ``expect`` exactly one returns
        True. False when the schedule is gone or its ``next_fire_at`` is another (a
        repeat after a lost reply may also say False for a move that landed)."""

    # ---- the registry of serving engines (1 command each) ----------------------------

    async def put_worker(self, worker: Worker) -> None:
        """Record or refresh a serving engine, by ``instance_id`` (one write). The store
        may fill in ``clock_offset`` with its own measure of this host's clock."""

    async def delete_worker(self, instance_id: str) -> None:
        """Remove a stopping engine's record (nothing when there is none)."""

    async def list_workers(self) -> list[Worker]:
        """The engines whose record has not expired (``expires_at`` after now), sorted
        by ``started_at`` then ``instance_id`` (one read)."""

    # ---- operating (the dashboard) ----------------------------------------------

    async def count_runs(self, *, workflow: str | None = None) -> dict[str, int]:
        """How many runs (of ``workflow``, when given) there are in each status; a status
        with no run is absent. Must not read every run document where the storage can
        count another way (one aggregation, an index)."""

    async def list_workflows(self) -> list[str]:
        """The names of the workflows of the stored runs, sorted, each once."""
