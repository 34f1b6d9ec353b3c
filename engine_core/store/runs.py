"""The store protocol's runs: the control plane of passes, lists of runs, forks."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol

from engine_core.records import (
    RunRecord,
    RunState,
    StepRecord,
)


class RunStore(Protocol):
    """Runs: the control plane of passes, lists of runs, forks (part of
    :class:`~engine_core.store.Store`)."""

    # ---- runs -------------------------------------------------------------------

    async def insert_run(self, run: RunRecord) -> RunRecord | None:
        """Insert ``run`` unless a run with its id exists.

        Returns None when this call inserted it, else the existing run, unchanged.
        Of any number of concurrent inserts of one id exactly one inserts. A run inserted
        with a lease (``lease_holder``, ``lease_expires_at``, a token and an open pass)
        is inserted holding it: its first pass needs no :meth:`begin_pass`.

        A run with a ``dedup_id`` is inserted only if no run that is not terminal holds
        the same (``queue``, ``dedup_id``); otherwise nothing is written and
        :class:`~engine_core.DuplicateRunError` names the run holding it (of concurrent
        inserts holding one pair, exactly one lands). The pair is free again once its
        run reaches a terminal status (every write that moves a run to one frees it).
        """

    async def get_run(self, run_id: str) -> RunRecord | None:
        """The run with this id, or None."""

    async def get_runs(
        self, run_ids: Sequence[str], *, status_in: Sequence[str] | None = None
    ) -> list[RunRecord]:
        """The runs with these ids that exist (and, with ``status_in``, are in one of
        those statuses), in no particular order: one query for many waiters."""

    async def begin_pass(
        self,
        run_id: str,
        *,
        holder: str,
        ttl: float,
        held: int | None = None,
        workflows: Sequence[str] | None = None,
    ) -> RunRecord | None:
        """Open a pass under the run's lease, in one atomic write: add one to ``token``
        and ``passes``, clear ``pending_pass`` and ``changed``, set ``open_pass``, and
        give the lease to ``holder`` for ``ttl`` seconds.

        Without ``held`` it lands only if the run's lease is free or expired; with
        ``held`` (the token of the pass ``holder`` just ran) only if the token is still
        ``held``: the holder goes on under the lease it has; with ``workflows``, only if
        the run is of one of them (a holder begins no pass it cannot run). Returns the run
        after the write, except that ``changed`` lists what it held before (the steps settled
        outside passes since the previous pass began); None when the lease is live
        elsewhere, the token moved on, or the run does not exist. The token fences every
        later write of this pass."""

    async def extend_pass(self, run_id: str, *, token: int, ttl: float) -> bool:
        """Push the run's lease out to now + ``ttl``, if the pass ``token`` still holds
        it; whether it did."""

    async def release_pass(self, run_id: str, *, token: int) -> None:
        """Give up the run's lease (a pass that stops without settling), if the pass
        ``token`` still holds it."""

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
        """Record that an attempt of step ``key`` starts, if the run may still start it.

        Lands only if the run's status is ``status`` and its token is ``token``: a stop
        request or a newer pass is seen here. In the same write: sets ``open_pass`` and
        ``inflight[key]``, removes the ``done`` keys from ``inflight``, puts each of
        ``outcomes`` (whole step records) in the run's ``journal`` under its key, and
        removes the ``forget`` keys from the journal; ``order`` and ``group`` go in the
        mark (see ``InflightStep``). Returns whether it landed."""

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
        """The write of :meth:`start_step` without starting a step: outcomes that cannot
        wait for the next step boundary."""

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
        """End a pass: clear ``inflight`` and ``open_pass``, free the run's lease (unless
        ``keep_lease``: the pass goes on, as a failing run compensates), journal
        ``outcomes`` and drop the ``forget`` keys as :meth:`start_step` does, and, when
        ``status`` is given, move the run to it (with ``output`` and ``error``; a
        terminal ``status`` with ``expire_at``, the time the run may be deleted). Lands
        only if the token is ``token``, the status is one of ``expect`` and, with
        ``idle_only``, no pass is owed (``pending_pass`` false: a trigger came while the
        pass ran, and the holder must run another). Returns whether it landed."""

    async def request_pass(self, run_id: str, *, changed: str | None = None) -> None:
        """Note that the run is owed a pass (sets ``pending_pass``) and, with ``changed``,
        that step ``changed`` was settled outside a pass. Never lost: a pass that begins
        after this call returns sees the flag cleared by its own begin."""

    async def request_passes(self, run_ids: Sequence[str]) -> None:
        """:meth:`request_pass` for many runs at once (a recovery sweep's wake-ups)."""

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
        """Move the run to ``status`` if it is in one of ``expect`` (not fenced by token:
        this is how cancel, suspend and resume act on a run a pass may hold). Sets
        ``error`` when given, ``pending_pass`` when asked and, for a terminal ``status``,
        ``expire_at`` when given; adds ``"*"`` (everything) to ``changed``, and drops the
        ``forget`` keys from the journal. Returns the run after the write, or None when
        the guard failed or the run does not exist."""

    async def list_child_runs(self, run_id: str) -> list[RunRecord]:
        """Every run whose parent is ``run_id``."""

    async def find_runs_needing_pass(self, workflows: Sequence[str], limit: int) -> list[str]:
        """Ids of up to ``limit`` runs of these workflows that are ``running`` or
        ``compensating`` with ``pending_pass`` set, least recently updated first."""

    async def find_idle_runs(
        self, before: datetime, limit: int, *, in_flight_only: bool = False
    ) -> list[RunRecord]:
        """Up to ``limit`` ``running`` or ``compensating`` runs not updated since
        ``before``, least recently updated first; with ``in_flight_only`` only those
        with ``open_pass`` set (a pass began and never settled)."""

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
        lean: bool = False,
    ) -> list[RunRecord]:
        """Runs ordered by id, starting after the id ``after`` (keyset pagination);
        ``order="newest"`` or ``"oldest"``: by creation time (ties by id), newest or oldest
        first, starting after the run ``after`` (none when it is gone), served by an index,
        never by sorting the runs in memory. ``prefix``: only ids that start with it (as
        plain characters, never a pattern). ``created_since`` (inclusive) and
        ``created_before`` (exclusive): only runs created in that range. ``version``: only
        runs started with that label. ``lean`` (``replay_check``): a store may leave what
        dry replays never read (journal histories and times, flow control, lease) unset."""

    async def delete_runs(self, *, finished_before: datetime, limit: int) -> int:
        """Delete up to ``limit`` terminal runs last updated before ``finished_before``,
        with their steps, events, streams and heartbeats; returns how many it deleted."""

    async def expire_runs(self, before: datetime, limit: int) -> int:
        """Retention (``expire_at``, see :meth:`settle_run`): delete up to ``limit``
        terminal runs whose ``expire_at`` is earlier than ``before``, with everything they
        own, as :meth:`delete_runs` does (a run that has not ended is never deleted,
        whatever it holds). A store whose storage deletes expired documents by itself
        (MongoDB's TTL monitor) may instead make up to ``limit`` ended runs' documents
        ready for it. Returns how many runs it deleted or made ready. Called by every
        recovery pass: bounded work."""

    # ---- forks (``engine.fork``) -----------------------------------------------

    async def fork_run(self, run: RunRecord, steps: Sequence[StepRecord]) -> RunRecord | None:
        """Make a fork: its copied ``steps`` (whole records of run ``run.run_id``) and
        ``run``, inserted as :meth:`insert_run` inserts (None when this call made it, the
        existing run, unchanged, when one has the id; :class:`~engine_core.DuplicateRunError`
        as there). No reader sees the run without its steps: without transactions the
        run is written last, and steps written for a run that never was stay invisible
        (no sweep, listing or count reads them) until :meth:`clean_forks`. Safe to
        repeat with the same run id (a repeat after a lost reply makes no second fork)."""

    async def list_forks(self, run_id: str, *, limit: int) -> list[str]:
        """The ids of up to ``limit`` runs forked from ``run_id``, oldest first."""

    async def clean_forks(self, before: datetime) -> int:
        """Delete the steps of forks begun before ``before`` whose run was never written
        (their forker died between the writes). Returns how many such forks it undid."""
