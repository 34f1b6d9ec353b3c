"""The store protocol's steps: records, queue jobs and their claims."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol

from engine_core.records import (
    AttemptEntry,
    StepGuard,
    StepPage,
    StepRecord,
)


class StepStore(Protocol):
    """Steps: records, queue jobs and their claims. Part of :class:`~engine_core.store.Store`."""

    # ---- steps ------------------------------------------------------------------

    async def load_steps(self, run_id: str) -> list[StepRecord]:
        """Every step record of the run (merge its ``journal`` for the latest outcomes:
        :func:`engine_core.common.journal.merged_steps`)."""

    async def load_steps_of(
        self, run_ids: Sequence[str], *, lean: bool = False
    ) -> dict[str, list[StepRecord]]:
        """:meth:`load_steps` for many runs at once (an offline check reads thousands):
        each run's step records by run id (none: ``[]``); ``lean`` as :meth:`list_runs`."""

    async def get_step(self, run_id: str, key: str) -> StepRecord | None:
        """One step record, or None (a step whose outcome is only in its run's journal
        is read through the run)."""

    async def get_steps(self, run_id: str, keys: Iterable[str]) -> list[StepRecord]:
        """The step records of these keys that exist, in no particular order."""

    async def save_steps(self, steps: Sequence[StepRecord]) -> None:
        """Write each step record whole, creating it if missing, unless the stored record
        has more attempts than it has (a newer attempt's outcome is never overwritten).
        Safe to repeat: how a run's journal is copied to its step records."""

    async def insert_step(self, step: StepRecord) -> bool:
        """Insert ``step`` unless (run id, key) exists; one of any concurrent inserts
        lands. Returns whether this call inserted it."""

    async def update_step(
        self,
        run_id: str,
        key: str,
        *,
        guard: StepGuard,
        changes: dict[str, Any],
        entry: AttemptEntry | None = None,
    ) -> bool:
        """Apply ``changes`` (StepRecord field names to values) and append ``entry`` to
        the history, only if the step matches ``guard``. With ``guard.missing_ok`` a
        missing step is created from the changes. Returns whether it landed; of racing
        writers with the same guard at most one lands when the changes break the guard
        for the others (this is how outcomes are fenced by attempt)."""

    async def find_unnotified_steps(self, before: datetime, limit: int) -> list[StepRecord]:
        """Up to ``limit`` steps with ``notified`` false, last updated before ``before``."""

    async def claim_steps(
        self, functions: Sequence[str], *, holder: str, claim_ttl: float, limit: int
    ) -> list[StepRecord]:
        """Claim up to ``limit`` queue jobs among dispatched steps of these functions,
        those due first. Eligible: not halted, ``scheduled``, ``due_at`` reached. (A
        claim that lapsed is put back by :meth:`requeue_lapsed_claims`.) Each claim sets
        ``running``, adds one to ``attempts`` and sets the claim holder and expiry,
        atomically per job: of any number of concurrent claimers exactly one gets each
        job attempt. Returns the jobs claimed (after the claim); empty if nothing is due."""

    async def find_claims(self, holder: str) -> list[StepRecord]:
        """Every queue job ``running`` under a claim of ``holder``."""

    async def requeue_lapsed_claims(self) -> int:
        """Put every dispatched step that is ``running`` under a claim that has lapsed
        back on the queue (``scheduled``, due now, no holder); its next claim is a new
        attempt. Returns how many were put back."""

    async def extend_claim(
        self, run_id: str, key: str, *, holder: str, attempt: int, claim_ttl: float
    ) -> bool:
        """Push the claim's expiry out, if ``holder`` still holds ``attempt``."""

    async def halt_steps(self, run_id: str, halted: bool) -> None:
        """Mark every dispatched step of the run halted (not claimable) or not."""

    async def find_scheduled_steps(
        self, limit: int, after: StepPage | None = None
    ) -> list[StepRecord]:
        """Up to ``limit`` ``scheduled`` steps with a due time, ordered by (due_at,
        run_id, key), starting strictly after ``after``. A scan that pages with the last
        row's key visits each step once and costs O(N) over N steps. (A page may run past
        ``limit`` to finish the steps due at its last moment.) The records carry at least
        their run id, key, kind, status, due time and child run id (what sweeps use)."""

    def job_hints(self) -> AsyncIterator[None] | None:
        """Wake-ups for idle workers: yields when a queue job may have been inserted by
        any process (a hint, never a promise), or None when the store has no way to
        tell; workers then poll with a backoff."""
