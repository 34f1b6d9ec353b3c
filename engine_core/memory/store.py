"""``InMemoryStore``: the reference store, for one process and for tests.

Every method runs without awaiting in between its read and its write, so each is
atomic under asyncio. Records are copied in and out so callers never share state
with the store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from engine_core.common.clock import REAL_CLOCK
from engine_core.common.sizes import parse_size
from engine_core.errors import DuplicateRunError
from engine_core.memory.cloning import clone
from engine_core.memory.events import EventLeaseMemory
from engine_core.memory.flow import FlowMemory
from engine_core.memory.flow_keys import FlowKeyMemory
from engine_core.memory.steps import StepMemory
from engine_core.memory.streams import StreamMemory
from engine_core.memory.talk import TalkMemory
from engine_core.memory.workers import WorkerMemory
from engine_core.records import (
    ACTIVE,
    TERMINAL,
    EventRecord,
    InflightStep,
    KeyWindow,
    Lease,
    QueueState,
    RunRecord,
    RunState,
    ScheduleRecord,
    StepRecord,
    UpdateRecord,
    ValueRecord,
)
from engine_core.store import TimeSource


class InMemoryStore(
    StepMemory,
    EventLeaseMemory,
    FlowMemory,
    FlowKeyMemory,
    WorkerMemory,
    StreamMemory,
    TalkMemory,
):
    """A single-process store that keeps everything in dicts."""

    def __init__(self, *, max_value: int | str = "256MiB") -> None:
        """``max_value``: the largest value it keeps (characters of JSON; bytes or a size
        such as ``"256MiB"``, as ``MongoStore(max_value=...)``, whose default it shares, so
        a value refused on one store is refused on the other)."""
        #: Read by the engine (``engine_core.common.values.value_limit``).
        self.max_value_bytes = parse_size(max_value, what="max_value")
        #: The clock its engine reads, the real one until an engine hands it another
        #: (:meth:`follow_clock`): leases, claims, due times and stamps all read it.
        self.clock: TimeSource = REAL_CLOCK
        self._clock_set = False
        self._runs: dict[str, RunRecord] = {}
        self._steps: dict[tuple[str, str], StepRecord] = {}
        self._events: list[EventRecord] = []
        self._leases: dict[str, Lease] = {}
        # The scheduled steps in scan order, kept until a step changes: a sweep that
        # pages through N parked steps sorts them once, not once a page.
        self._scheduled: list[tuple[datetime, str, str]] | None = None
        self._queues: dict[str, QueueState] = {}
        # (queue or "", dedup_id) -> the run that took it; free once that run is terminal.
        self._dedup: dict[tuple[str, str], str] = {}
        self._schedules: dict[str, ScheduleRecord] = {}
        self._queue_limits: dict[str, dict[str, Any]] = {}
        self._turns: dict[tuple[str, str | None], int] = {}
        self._windows: dict[tuple[str, str], tuple[int, tuple[datetime, float | None] | None]] = {}
        self._key_windows: dict[tuple[str, str | None], KeyWindow] = {}
        self._values: dict[tuple[str, str], ValueRecord] = {}
        self._updates: dict[tuple[str, str], UpdateRecord] = {}
        self._talk_waiters: dict[str, set[asyncio.Queue[Any]]] = {
            kind: set() for kind in ("values", "answers", "updates")
        }

    async def init(self) -> None:
        """:meth:`Store.init <engine_core.store.Store.init>`, in memory."""
        return None

    async def close(self) -> None:
        """:meth:`Store.close <engine_core.store.Store.close>`, in memory."""
        return None

    def follow_clock(self, clock: TimeSource) -> None:
        """:meth:`Store.follow_clock <engine_core.store.Store.follow_clock>`: read
        ``clock`` from now on. One store keeps one clock: an engine that hands it another
        than the one it follows (a ``VirtualClock`` for one engine, the real clock for
        the next) gets a ``ValueError``."""
        if self._clock_set and clock is not self.clock:
            raise ValueError(
                f"this InMemoryStore follows {self.clock!r} already, handed to it by another "
                f"Engine: give every Engine on one store the same clock= (not {clock!r})"
            )
        self.clock, self._clock_set = clock, True

    # ---- runs -------------------------------------------------------------------

    async def insert_run(self, run: RunRecord) -> RunRecord | None:
        """:meth:`Store.insert_run <engine_core.store.Store.insert_run>`, in memory."""
        existing = self._runs.get(run.run_id)
        if existing is not None:
            return clone(existing)
        if run.dedup_id is not None:
            pair = (run.queue or "", run.dedup_id)
            holder = self._runs.get(self._dedup.get(pair, ""))
            if holder is not None and holder.status not in TERMINAL:
                raise DuplicateRunError(
                    f"run {holder.run_id!r} holds dedup id {run.dedup_id!r}"
                    + (f" on queue {run.queue!r}" if run.queue else "")
                    + " and has not ended",
                    run_id=holder.run_id,
                )
            self._dedup[pair] = run.run_id
        stored = clone(run)
        self._line_up(stored)
        self._runs[run.run_id] = stored
        return None

    async def get_run(self, run_id: str) -> RunRecord | None:
        """:meth:`Store.get_run <engine_core.store.Store.get_run>`, in memory."""
        run = self._runs.get(run_id)
        return clone(run) if run is not None else None

    async def get_runs(
        self, run_ids: Sequence[str], *, status_in: Sequence[str] | None = None
    ) -> list[RunRecord]:
        """:meth:`Store.get_runs <engine_core.store.Store.get_runs>`, in memory."""
        found = (self._runs.get(run_id) for run_id in set(run_ids))
        return [
            clone(r)
            for r in found
            if r is not None and (status_in is None or r.status in status_in)
        ]

    async def begin_pass(
        self,
        run_id: str,
        *,
        holder: str,
        ttl: float,
        held: int | None = None,
        workflows: Sequence[str] | None = None,
    ) -> RunRecord | None:
        """:meth:`Store.begin_pass <engine_core.store.Store.begin_pass>`, in memory."""
        run = self._runs.get(run_id)
        if run is None or (workflows is not None and run.workflow not in workflows):
            return None
        now = self.clock.now()
        if held is None:
            if run.lease_expires_at is not None and run.lease_expires_at > now:
                return None
        elif run.token != held:
            return None
        run.token += 1
        run.passes += 1
        run.pending_pass = False
        run.open_pass = True
        run.lease_holder = holder
        run.lease_expires_at = now + timedelta(seconds=ttl)
        changed, run.changed = run.changed, []
        begun = clone(run)
        begun.changed = changed
        return begun

    async def extend_pass(self, run_id: str, *, token: int, ttl: float) -> bool:
        """:meth:`Store.extend_pass <engine_core.store.Store.extend_pass>`, in memory."""
        run = self._runs.get(run_id)
        if run is None or run.token != token or run.lease_expires_at is None:
            return False
        run.lease_expires_at = self.clock.now() + timedelta(seconds=ttl)
        return True

    async def release_pass(self, run_id: str, *, token: int) -> None:
        """:meth:`Store.release_pass <engine_core.store.Store.release_pass>`, in memory."""
        run = self._runs.get(run_id)
        if run is not None and run.token == token:
            run.lease_expires_at = None

    def _fenced(self, run_id: str, token: int, expect: Iterable[str]) -> RunRecord | None:
        run = self._runs.get(run_id)
        if run is None or run.token != token or run.status not in expect:
            return None
        return run

    def _journal(
        self,
        run: RunRecord,
        done: Iterable[str],
        outcomes: Sequence[StepRecord],
        forget: Iterable[str],
    ) -> None:
        for finished in done:
            run.inflight.pop(finished, None)
        for key in forget:
            run.journal.pop(key, None)
        for outcome in outcomes:
            run.journal[outcome.key] = clone(outcome)
        run.updated_at = self.clock.now()

    async def start_step(
        self,
        run_id: str,
        *,
        token: int,
        status: RunState,
        key: str,
        attempt: int,
        started_at: datetime,
        done: Iterable[str] = (),
        outcomes: Sequence[StepRecord] = (),
        forget: Iterable[str] = (),
        order: int | None = None,
        group: int | None = None,
    ) -> bool:
        """:meth:`Store.start_step <engine_core.store.Store.start_step>`, in memory."""
        run = self._fenced(run_id, token, (status,))
        if run is None:
            return False
        self._journal(run, done, outcomes, forget)
        run.inflight[key] = InflightStep(attempt, started_at, order, group)
        run.open_pass = True
        return True

    async def record_steps(
        self,
        run_id: str,
        *,
        token: int,
        status: RunState,
        outcomes: Sequence[StepRecord],
        done: Iterable[str] = (),
        forget: Iterable[str] = (),
    ) -> bool:
        """:meth:`Store.record_steps <engine_core.store.Store.record_steps>`, in memory."""
        run = self._fenced(run_id, token, (status,))
        if run is None:
            return False
        self._journal(run, done, outcomes, forget)
        return True

    async def settle_run(
        self,
        run_id: str,
        *,
        token: int,
        expect: Sequence[RunState],
        status: RunState | None = None,
        output: Any = None,
        error: dict[str, Any] | None = None,
        outcomes: Sequence[StepRecord] = (),
        forget: Iterable[str] = (),
        idle_only: bool = False,
        keep_lease: bool = False,
        expire_at: datetime | None = None,
    ) -> bool:
        """:meth:`Store.settle_run <engine_core.store.Store.settle_run>`, in memory."""
        run = self._fenced(run_id, token, expect)
        if run is None or (idle_only and run.pending_pass):
            return False
        self._journal(run, (), outcomes, forget)
        run.inflight = {}
        run.open_pass = False
        if not keep_lease:
            run.lease_expires_at = None
        if status is not None:
            run.status = status
            run.output = clone(output)
            run.error = clone(error)
            if status in TERMINAL:
                run.expire_at = expire_at
        return True

    async def request_pass(self, run_id: str, *, changed: str | None = None) -> None:
        """:meth:`Store.request_pass <engine_core.store.Store.request_pass>`, in memory."""
        run = self._runs.get(run_id)
        if run is not None:
            run.pending_pass = True
            if changed is not None and changed not in run.changed:
                run.changed.append(changed)

    async def request_passes(self, run_ids: Sequence[str]) -> None:
        """:meth:`Store.request_passes <engine_core.store.Store.request_passes>`, in memory."""
        for run_id in run_ids:
            await self.request_pass(run_id)

    async def set_run_status(
        self,
        run_id: str,
        status: RunState,
        *,
        expect: Sequence[RunState],
        error: dict[str, Any] | None = None,
        request_pass: bool = False,
        forget: Iterable[str] = (),
        expire_at: datetime | None = None,
    ) -> RunRecord | None:
        """:meth:`Store.set_run_status <engine_core.store.Store.set_run_status>`, in memory."""
        run = self._runs.get(run_id)
        if run is None or run.status not in expect:
            return None
        for key in forget:
            run.journal.pop(key, None)
        if "*" not in run.changed:
            run.changed.append("*")  # a stop or a restart: passes read every step again
        run.status = status
        if status in TERMINAL:
            run.expire_at = expire_at
        if error is not None:
            run.error = clone(error)
        if request_pass:
            run.pending_pass = True
        run.updated_at = self.clock.now()
        return clone(run)

    async def fork_run(self, run: RunRecord, steps: Sequence[StepRecord]) -> RunRecord | None:
        # No await in between: the steps and the run land together or not at all.
        """:meth:`Store.fork_run <engine_core.store.Store.fork_run>`, in memory."""
        existing = self._runs.get(run.run_id)
        if existing is not None:
            return clone(existing)
        taken = await self.insert_run(run)  # raises (writing nothing) on a held dedup id
        for step in steps:
            self._steps[(step.run_id, step.key)] = clone(step)
        self._scheduled = None
        return taken

    async def list_forks(self, run_id: str, *, limit: int) -> list[str]:
        """:meth:`Store.list_forks <engine_core.store.Store.list_forks>`, in memory."""
        forks = [
            r
            for r in self._runs.values()
            if r.forked_from is not None and r.forked_from.get("run_id") == run_id
        ]
        forks.sort(key=lambda r: (r.created_at, r.run_id))
        return [r.run_id for r in forks[:limit]]

    async def clean_forks(self, before: datetime) -> int:
        """:meth:`Store.clean_forks <engine_core.store.Store.clean_forks>`, in memory."""
        return 0  # a fork is made in one step here: none is ever half-made

    async def list_child_runs(self, run_id: str) -> list[RunRecord]:
        """:meth:`Store.list_child_runs <engine_core.store.Store.list_child_runs>`, in memory."""
        return [clone(r) for r in self._runs.values() if r.parent_run_id == run_id]

    async def find_runs_needing_pass(self, workflows: Sequence[str], limit: int) -> list[str]:
        """:meth:`Store.find_runs_needing_pass
        <engine_core.store.Store.find_runs_needing_pass>`, in memory."""
        wanted = set(workflows)
        found = sorted(
            (
                r
                for r in self._runs.values()
                if r.pending_pass and r.workflow in wanted and r.status in ACTIVE
            ),
            key=lambda r: (r.updated_at, r.run_id),
        )
        return [r.run_id for r in found[:limit]]

    async def find_idle_runs(
        self, before: datetime, limit: int, *, in_flight_only: bool = False
    ) -> list[RunRecord]:
        """:meth:`Store.find_idle_runs <engine_core.store.Store.find_idle_runs>`, in memory."""
        found = sorted(
            (
                r
                for r in self._runs.values()
                if r.status in ACTIVE
                and r.updated_at < before
                and (r.open_pass or not in_flight_only)
            ),
            key=lambda r: (r.updated_at, r.run_id),
        )
        return [clone(r) for r in found[:limit]]

    async def list_runs(
        self,
        *,
        workflow: str | None,
        status: str | None,
        limit: int,
        after: str | None,
        prefix: str | None = None,
        created_since: datetime | None = None,
        created_before: datetime | None = None,
        version: str | None = None,
        order: str = "id",
        lean: bool = False,  # whole records: a copy costs no more than a lean one
    ) -> list[RunRecord]:
        """:meth:`Store.list_runs <engine_core.store.Store.list_runs>`, in memory."""
        if order != "id":
            return self._list_by_time(
                workflow,
                status,
                limit,
                after,
                prefix,
                created_since,
                created_before,
                version,
                order,
            )
        found = sorted(
            (
                r
                for r in self._runs.values()
                if (workflow is None or r.workflow == workflow)
                and (status is None or r.status == status)
                and (after is None or r.run_id > after)
                and (prefix is None or r.run_id.startswith(prefix))
                and (created_since is None or r.created_at >= created_since)
                and (created_before is None or r.created_at < created_before)
                and (version is None or r.version == version)
            ),
            key=lambda r: r.run_id,
        )
        return [clone(r) for r in found[:limit]]

    def _list_by_time(
        self,
        workflow: str | None,
        status: str | None,
        limit: int,
        after: str | None,
        prefix: str | None,
        created_since: datetime | None,
        created_before: datetime | None,
        version: str | None,
        order: str,
    ) -> list[RunRecord]:
        newest = order == "newest"
        start = None
        if after is not None:
            if after not in self._runs:
                return []
            start = (self._runs[after].created_at, after)
        found = sorted(
            (
                r
                for r in self._runs.values()
                if (workflow is None or r.workflow == workflow)
                and (status is None or r.status == status)
                and (prefix is None or r.run_id.startswith(prefix))
                and (created_since is None or r.created_at >= created_since)
                and (created_before is None or r.created_at < created_before)
                and (version is None or r.version == version)
                and (
                    start is None
                    or (
                        (r.created_at, r.run_id) < start
                        if newest
                        else (r.created_at, r.run_id) > start
                    )
                )
            ),
            key=lambda r: (r.created_at, r.run_id),
            reverse=newest,
        )
        return [clone(r) for r in found[:limit]]

    async def delete_runs(self, *, finished_before: datetime, limit: int) -> int:
        """:meth:`Store.delete_runs <engine_core.store.Store.delete_runs>`, in memory."""
        doomed = sorted(
            r.run_id
            for r in self._runs.values()
            if r.status in TERMINAL and r.updated_at < finished_before
        )[:limit]
        return self._delete(doomed)

    async def expire_runs(self, before: datetime, limit: int) -> int:
        """:meth:`Store.expire_runs <engine_core.store.Store.expire_runs>`, in memory (a
        scan of the runs: the recovery pass that calls it scans them anyway)."""
        due = sorted(
            (r.expire_at, r.run_id)
            for r in self._runs.values()
            if r.status in TERMINAL and r.expire_at is not None and r.expire_at < before
        )
        return self._delete([run_id for _, run_id in due[:limit]])

    def _delete(self, doomed: list[str]) -> int:
        """Delete these runs with everything they own; how many."""
        if not doomed:
            return 0
        gone = set(doomed)
        for run_id in doomed:
            del self._runs[run_id]
        self._steps = {k: s for k, s in self._steps.items() if k[0] not in gone}
        self._scheduled = None
        self._events = [e for e in self._events if e.run_id not in gone]
        self._drop_streams(gone)
        self._drop_talk(gone)
        return len(doomed)

    # ---- operating (the dashboard) ----------------------------------------------

    async def count_runs(self, *, workflow: str | None = None) -> dict[str, int]:
        """:meth:`Store.count_runs <engine_core.store.Store.count_runs>`, in memory."""
        counts: dict[str, int] = {}
        for run in self._runs.values():
            if workflow is None or run.workflow == workflow:
                counts[run.status] = counts.get(run.status, 0) + 1
        return counts

    async def put_queue_limits(self, name: str, limits: dict[str, Any]) -> None:
        """:meth:`Store.put_queue_limits <engine_core.store.Store.put_queue_limits>`, in
        memory."""
        self._queue_limits[name] = dict(limits)

    async def list_queue_limits(self) -> dict[str, dict[str, Any]]:
        """:meth:`Store.list_queue_limits <engine_core.store.Store.list_queue_limits>`, in
        memory."""
        return {name: dict(limits) for name, limits in self._queue_limits.items()}

    async def list_workflows(self) -> list[str]:
        """:meth:`Store.list_workflows <engine_core.store.Store.list_workflows>`, in memory."""
        return sorted({run.workflow for run in self._runs.values()})
