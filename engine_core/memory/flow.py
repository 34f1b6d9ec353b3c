"""The in-memory store's flow control and schedules: queue states, the line, dedup
ids, delays, deadlines and schedules, over the same dicts as its runs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from engine_core.errors import DuplicateRunError
from engine_core.memory.cloning import clone
from engine_core.records import (
    TERMINAL,
    LinePage,
    QueueState,
    RunRecord,
    RunState,
    ScheduleRecord,
    debounce_run_id,
)
from engine_core.store import TimeSource


class FlowMemory:
    """The flow-control and schedule methods of :class:`~engine_core.memory.store.InMemoryStore`."""

    #: The clock its engine reads (see ``InMemoryStore.follow_clock``).
    clock: TimeSource
    _runs: dict[str, RunRecord]
    _queues: dict[str, QueueState]
    _schedules: dict[str, ScheduleRecord]
    _dedup: dict[tuple[str, str], str]
    #: (queue, key) -> the turn the key's next run in a fair line takes at least.
    _turns: dict[tuple[str, str | None], int]
    #: (workflow, debounce key) -> the open window's number, or closed: (number, None).
    _windows: dict[tuple[str, str], tuple[int, tuple[datetime, float | None] | None]]

    def _line_up(self, run: RunRecord) -> None:
        """A run joining its queue's line in order: on a fair queue it takes its turn
        (see :class:`~engine_core.store.FlowKeyStore`)."""
        if not run.fair or run.queue is None or run.status != "queued" or run.not_before:
            return
        state = self._queues.get(run.queue)
        floor = state.turn if state is not None else 0
        pair = (run.queue, run.queue_key)
        run.queue_turn = max(self._turns.get(pair, 0), floor)
        self._turns[pair] = run.queue_turn + 1

    def _end_window(self, run: RunRecord) -> None:
        """``run`` left its debounce window's pending state: the window ends."""
        if run.debounce_key is None:
            return
        pair = (run.workflow, run.debounce_key)
        number, opened = self._windows.get(pair, (0, None))
        if opened is not None and debounce_run_id(*pair, number) == run.run_id:
            self._windows[pair] = (number + 1, None)

    # ---- flow control: queues, delays, deadlines ---------------------------------

    async def get_queue_state(self, name: str) -> QueueState | None:
        """:meth:`Store.get_queue_state <engine_core.store.Store.get_queue_state>`, in memory."""
        state = self._queues.get(name)
        return clone(state) if state is not None else None

    async def save_queue_state(self, state: QueueState, *, expect_version: int) -> bool:
        """:meth:`Store.save_queue_state <engine_core.store.Store.save_queue_state>`, in
        memory."""
        stored = self._queues.get(state.name)
        if (stored.version if stored is not None else 0) != expect_version:
            return False
        self._queues[state.name] = clone(state)
        return True

    async def queued_runs(
        self, queue: str, *, limit: int, after: LinePage | None = None
    ) -> list[RunRecord]:
        """:meth:`Store.queued_runs <engine_core.store.Store.queued_runs>`, in memory."""
        line = sorted((r for r in self._runs.values() if _in_line(r, queue)), key=_place)
        if after is not None:
            start = _place(after)
            line = [r for r in line if _place(r) > start]
        return [clone(r) for r in line[:limit]]

    async def admit_runs(self, runs: Sequence[RunRecord]) -> int:
        """:meth:`Store.admit_runs <engine_core.store.Store.admit_runs>`, in memory."""
        moved = 0
        for run_id in dict.fromkeys(r.run_id for r in runs):
            run = self._runs.get(run_id)
            if run is not None and run.status == "queued" and run.not_before is None:
                self._admit(run)
                moved += 1
        return moved

    async def count_admitted(self, queue: str) -> int:
        """:meth:`Store.count_admitted <engine_core.store.Store.count_admitted>`, in memory."""
        return sum(1 for r in self._runs.values() if _admitted(r, queue))

    async def count_admitted_keys(
        self, queue: str, keys: Sequence[str | None]
    ) -> dict[str | None, int]:
        """:meth:`Store.count_admitted_keys <engine_core.store.Store.count_admitted_keys>`,
        in memory."""
        wanted = set(keys)
        counts: dict[str | None, int] = {}
        for run in self._runs.values():
            if _admitted(run, queue) and run.queue_key in wanted:
                counts[run.queue_key] = counts.get(run.queue_key, 0) + 1
        return counts

    async def admit_run_holding(
        self, run: RunRecord, *, holder: str, ttl: float
    ) -> RunRecord | None:
        """:meth:`Store.admit_run_holding <engine_core.store.Store.admit_run_holding>`, in
        memory."""
        stored = self._runs.get(run.run_id)
        if (
            stored is None
            or stored.status != "queued"
            or stored.not_before is not None
            or stored.token != run.token
        ):
            return None
        self._admit(stored)
        stored.token += 1
        stored.passes += 1
        stored.pending_pass = False
        stored.open_pass = True
        stored.lease_holder = holder
        stored.lease_expires_at = self.clock.now() + timedelta(seconds=ttl)
        stored.changed = []
        return clone(stored)

    def _admit(self, run: RunRecord) -> None:
        run.status = "running"
        run.pending_pass = True
        run.updated_at = self.clock.now()

    async def find_delayed_runs(self, before: datetime, limit: int) -> list[RunRecord]:
        """:meth:`Store.find_delayed_runs <engine_core.store.Store.find_delayed_runs>`, in
        memory."""
        found = sorted(
            (
                r
                for r in self._runs.values()
                if r.status == "queued" and r.not_before is not None and r.not_before < before
            ),
            key=lambda r: (r.not_before or before, r.run_id),
        )
        return [clone(r) for r in found[:limit]]

    async def release_delayed_runs(self, runs: Sequence[RunRecord]) -> list[RunRecord]:
        """:meth:`Store.release_delayed_runs
        <engine_core.store.Store.release_delayed_runs>`, in memory."""
        released = []
        for read in {r.run_id: r for r in runs}.values():
            run = self._runs.get(read.run_id)
            if run is None or run.status != "queued" or run.not_before is None:
                continue
            if run.not_before != read.not_before:
                continue  # a debounced start moved it since it was read
            run.not_before = None
            self._end_window(run)
            if run.queue is None:
                self._admit(run)
            else:
                self._line_up(run)
            released.append(clone(run))
        return released

    async def dedup_holder(self, queue: str | None, dedup_id: str) -> str | None:
        """:meth:`Store.dedup_holder <engine_core.store.Store.dedup_holder>`, in memory."""
        holder = self._runs.get(self._dedup.get((queue or "", dedup_id), ""))
        return holder.run_id if holder is not None and holder.status not in TERMINAL else None

    async def reenter_run(
        self, run: RunRecord, *, expect: Sequence[RunState], forget: Iterable[str] = ()
    ) -> RunRecord | None:
        """:meth:`Store.reenter_run <engine_core.store.Store.reenter_run>`, in memory."""
        stored = self._runs.get(run.run_id)
        if stored is None or stored.status not in expect:
            return None
        if run.dedup_id is not None:
            holder = await self.dedup_holder(run.queue, run.dedup_id)
            if holder is not None and holder != run.run_id:
                raise DuplicateRunError(
                    f"run {holder!r} holds dedup id {run.dedup_id!r}"
                    + (f" on queue {run.queue!r}" if run.queue else "")
                    + f" and has not ended, so run {run.run_id!r} cannot take it again",
                    run_id=holder,
                )
            self._dedup[(run.queue or "", run.dedup_id)] = run.run_id
        for key in forget:
            stored.journal.pop(key, None)
        if "*" not in stored.changed:
            stored.changed.append("*")
        stored.status = run.status
        stored.pending_pass = run.pending_pass
        stored.not_before = None
        stored.expire_at = None  # live again: kept until it ends again
        stored.deadline_at = run.deadline_at
        stored.deadline_s = run.deadline_s
        stored.updated_at = self.clock.now()
        self._line_up(stored)
        return clone(stored)

    async def find_deadlines(self, before: datetime, limit: int) -> list[RunRecord]:
        """:meth:`Store.find_deadlines <engine_core.store.Store.find_deadlines>`, in memory."""
        found = sorted(
            (
                r
                for r in self._runs.values()
                if r.status not in TERMINAL and r.deadline_at is not None and r.deadline_at < before
            ),
            key=lambda r: (r.deadline_at or before, r.run_id),
        )
        return [clone(r) for r in found[:limit]]

    async def count_queue(self, queue: str) -> dict[str, int]:
        """:meth:`Store.count_queue <engine_core.store.Store.count_queue>`, in memory."""
        counts: dict[str, int] = {}
        for run in self._runs.values():
            if run.queue == queue and run.status not in TERMINAL:
                counts[run.status] = counts.get(run.status, 0) + 1
        return counts

    async def queue_names(self) -> list[str]:
        """:meth:`Store.queue_names <engine_core.store.Store.queue_names>`, in memory."""
        live = {r.queue for r in self._runs.values() if r.queue and r.status not in TERMINAL}
        return sorted(live | set(self._queues))

    # ---- schedules --------------------------------------------------------------

    async def put_schedule(self, schedule: ScheduleRecord) -> None:
        """:meth:`Store.put_schedule <engine_core.store.Store.put_schedule>`, in memory."""
        self._schedules[schedule.name] = clone(schedule)

    async def get_schedule(self, name: str) -> ScheduleRecord | None:
        """:meth:`Store.get_schedule <engine_core.store.Store.get_schedule>`, in memory."""
        found = self._schedules.get(name)
        return clone(found) if found is not None else None

    async def list_schedules(self) -> list[ScheduleRecord]:
        """:meth:`Store.list_schedules <engine_core.store.Store.list_schedules>`, in memory."""
        return [clone(self._schedules[name]) for name in sorted(self._schedules)]

    async def delete_schedule(self, name: str) -> bool:
        """:meth:`Store.delete_schedule <engine_core.store.Store.delete_schedule>`, in memory."""
        return self._schedules.pop(name, None) is not None

    async def set_schedule_paused(
        self,
        name: str,
        paused: bool,
        *,
        next_fire_at: datetime | None = None,
        updated_at: datetime,
    ) -> ScheduleRecord | None:
        """:meth:`Store.set_schedule_paused <engine_core.store.Store.set_schedule_paused>`,
        in memory."""
        found = self._schedules.get(name)
        if found is None:
            return None
        found.paused = paused
        found.updated_at = updated_at
        if next_fire_at is not None:
            found.next_fire_at = next_fire_at
        return clone(found)

    async def advance_schedule(
        self, name: str, *, expect: datetime, next_fire_at: datetime
    ) -> bool:
        """:meth:`Store.advance_schedule <engine_core.store.Store.advance_schedule>`, in
        memory."""
        found = self._schedules.get(name)
        if found is None or found.next_fire_at != expect:
            return False
        found.next_fire_at = next_fire_at
        found.updated_at = self.clock.now()
        return True


def _place(run: RunRecord | LinePage) -> tuple[int, bool, int, datetime, str]:
    """Where a run stands in its line: priority, then turn (runs without one first),
    then start time and id."""
    turn = run.queue_turn if isinstance(run, RunRecord) else run.turn
    return (run.priority, turn is not None, turn or 0, run.created_at, run.run_id)


def _in_line(run: RunRecord, queue: str) -> bool:
    return run.status == "queued" and run.queue == queue and run.not_before is None


def _admitted(run: RunRecord, queue: str) -> bool:
    return run.queue == queue and run.status != "queued" and run.status not in TERMINAL
