"""The in-memory store's steps: saving, guarded updates, dispatched-step claims and the
scan of parked steps."""

from __future__ import annotations

import bisect
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import fields
from datetime import datetime, timedelta
from typing import Any

from engine_core.memory.cloning import clone
from engine_core.records import AttemptEntry, StepGuard, StepPage, StepRecord
from engine_core.store import TimeSource

_STEP_FIELDS = frozenset(f.name for f in fields(StepRecord))


class StepMemory:
    """The step methods of :class:`~engine_core.memory.store.InMemoryStore`."""

    #: The clock its engine reads (see ``InMemoryStore.follow_clock``).
    clock: TimeSource
    _steps: dict[tuple[str, str], StepRecord]
    # The scheduled steps in scan order, kept until a step changes: a sweep that pages
    # through N parked steps sorts them once, not once a page.
    _scheduled: list[tuple[datetime, str, str]] | None

    async def load_steps(self, run_id: str) -> list[StepRecord]:
        """:meth:`Store.load_steps <engine_core.store.Store.load_steps>`, in memory."""
        return [clone(s) for (rid, _), s in self._steps.items() if rid == run_id]

    async def load_steps_of(
        self, run_ids: Sequence[str], *, lean: bool = False
    ) -> dict[str, list[StepRecord]]:
        """:meth:`Store.load_steps_of <engine_core.store.Store.load_steps_of>`, in memory."""
        found: dict[str, list[StepRecord]] = {run_id: [] for run_id in run_ids}
        for (rid, _), step in self._steps.items():
            if rid in found:
                found[rid].append(clone(step))
        return found

    async def get_step(self, run_id: str, key: str) -> StepRecord | None:
        """:meth:`Store.get_step <engine_core.store.Store.get_step>`, in memory."""
        step = self._steps.get((run_id, key))
        return clone(step) if step is not None else None

    async def get_steps(self, run_id: str, keys: Iterable[str]) -> list[StepRecord]:
        """:meth:`Store.get_steps <engine_core.store.Store.get_steps>`, in memory."""
        found = (self._steps.get((run_id, key)) for key in set(keys))
        return [clone(s) for s in found if s is not None]

    async def save_steps(self, steps: Sequence[StepRecord]) -> None:
        """:meth:`Store.save_steps <engine_core.store.Store.save_steps>`, in memory."""
        for step in steps:
            stored = self._steps.get((step.run_id, step.key))
            if stored is None or stored.attempts <= step.attempts:
                self._steps[(step.run_id, step.key)] = clone(step)
                self._scheduled = None

    async def insert_step(self, step: StepRecord) -> bool:
        """:meth:`Store.insert_step <engine_core.store.Store.insert_step>`, in memory."""
        if (step.run_id, step.key) in self._steps:
            return False
        self._steps[(step.run_id, step.key)] = clone(step)
        self._scheduled = None
        return True

    def job_hints(self) -> AsyncIterator[None] | None:
        """:meth:`Store.job_hints <engine_core.store.Store.job_hints>`, in memory."""
        return None  # one process: the engine wakes its worker itself

    async def update_step(
        self,
        run_id: str,
        key: str,
        *,
        guard: StepGuard,
        changes: dict[str, Any],
        entry: AttemptEntry | None = None,
    ) -> bool:
        """:meth:`Store.update_step <engine_core.store.Store.update_step>`, in memory."""
        unknown = set(changes) - _STEP_FIELDS
        if unknown:
            raise ValueError(f"unknown step fields {sorted(unknown)}")
        step = self._steps.get((run_id, key))
        if step is None:
            return False
        self._scheduled = None
        if not _matches(step, guard):
            return False
        for name, value in clone(changes).items():
            setattr(step, name, value)
        if entry is not None:
            step.history.append(clone(entry))
        return True

    async def find_unnotified_steps(self, before: datetime, limit: int) -> list[StepRecord]:
        """:meth:`Store.find_unnotified_steps
        <engine_core.store.Store.find_unnotified_steps>`, in memory."""
        found = sorted(
            (
                s
                for s in self._steps.values()
                if not s.notified and s.updated_at is not None and s.updated_at < before
            ),
            key=lambda s: (s.updated_at or before, s.run_id, s.key),
        )
        return [clone(s) for s in found[:limit]]

    async def claim_steps(
        self, functions: Sequence[str], *, holder: str, claim_ttl: float, limit: int
    ) -> list[StepRecord]:
        """:meth:`Store.claim_steps <engine_core.store.Store.claim_steps>`, in memory."""
        now = self.clock.now()
        wanted = set(functions)
        due = sorted(
            (
                s
                for s in self._steps.values()
                if s.kind == "dispatch"
                and not s.halted
                and s.function in wanted
                and s.status == "scheduled"
                and s.due_at is not None
                and s.due_at <= now
            ),
            key=_step_order,
        )[: max(0, limit)]
        if due:
            self._scheduled = None
        for step in due:
            step.status = "running"
            step.attempts += 1
            step.claim_holder = holder
            step.claim_expires_at = now + timedelta(seconds=claim_ttl)
            step.updated_at = now
        return [clone(s) for s in due]

    async def find_claims(self, holder: str) -> list[StepRecord]:
        """:meth:`Store.find_claims <engine_core.store.Store.find_claims>`, in memory."""
        return [
            clone(s)
            for s in self._steps.values()
            if s.kind == "dispatch" and s.status == "running" and s.claim_holder == holder
        ]

    async def requeue_lapsed_claims(self) -> int:
        """:meth:`Store.requeue_lapsed_claims
        <engine_core.store.Store.requeue_lapsed_claims>`, in memory."""
        now = self.clock.now()
        lapsed = [
            s
            for s in self._steps.values()
            if s.kind == "dispatch"
            and s.status == "running"
            and s.claim_expires_at is not None
            and s.claim_expires_at < now
        ]
        for step in lapsed:
            step.status = "scheduled"
            step.due_at = now
            step.claim_holder = None
            step.claim_expires_at = None
            step.updated_at = now
        if lapsed:
            self._scheduled = None
        return len(lapsed)

    async def extend_claim(
        self, run_id: str, key: str, *, holder: str, attempt: int, claim_ttl: float
    ) -> bool:
        """:meth:`Store.extend_claim <engine_core.store.Store.extend_claim>`, in memory."""
        step = self._steps.get((run_id, key))
        if (
            step is None
            or step.status != "running"
            or step.claim_holder != holder
            or step.attempts != attempt
        ):
            return False
        step.claim_expires_at = self.clock.now() + timedelta(seconds=claim_ttl)
        return True

    async def halt_steps(self, run_id: str, halted: bool) -> None:
        """:meth:`Store.halt_steps <engine_core.store.Store.halt_steps>`, in memory."""
        for (rid, _), step in self._steps.items():
            if rid == run_id and step.kind == "dispatch":
                step.halted = halted

    async def find_scheduled_steps(
        self, limit: int, after: StepPage | None = None
    ) -> list[StepRecord]:
        """:meth:`Store.find_scheduled_steps
        <engine_core.store.Store.find_scheduled_steps>`, in memory."""
        if self._scheduled is None:
            self._scheduled = sorted(
                _step_order(s)
                for s in self._steps.values()
                if s.status == "scheduled" and s.due_at is not None
            )
        start = 0
        if after is not None:
            start = bisect.bisect_right(self._scheduled, (after.due_at, after.run_id, after.key))
        page = self._scheduled[start : start + limit]
        return [clone(self._steps[(run_id, key)]) for _, run_id, key in page]


def _step_order(step: StepRecord) -> tuple[datetime, str, str]:
    assert step.due_at is not None
    return (step.due_at, step.run_id, step.key)


def _matches(step: StepRecord, guard: StepGuard) -> bool:
    if guard.status_in is not None and step.status not in guard.status_in:
        return False
    if guard.attempts_below is not None and step.attempts >= guard.attempts_below:
        return False
    if guard.attempts is not None and step.attempts != guard.attempts:
        return False
    return guard.claim_holder is None or step.claim_holder == guard.claim_holder
