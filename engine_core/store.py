"""The store protocol: the only seam between the engine and its storage.

Every method is a single atomic operation on the store; the engine builds its
guarantees on the guards stated here. "Atomic" means a concurrent caller sees either
the whole write or none of it, and that two callers racing on the same guard cannot
both win. Times are timezone-aware UTC datetimes. Values (inputs, results, payloads)
arrive already checked as JSON-shaped and come back equal to what was written.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from engine_core.records import (
    AttemptEntry,
    EventRecord,
    Lease,
    LinePage,
    QueueState,
    RunRecord,
    RunState,
    ScheduleRecord,
    StepGuard,
    StepPage,
    StepRecord,
    Worker,
)
from engine_core.streams import StreamEntry


@runtime_checkable
class Store(Protocol):
    """What the engine needs from storage. See ``engine_core.testing`` for the suite
    that checks an implementation against every guarantee below."""

    async def init(self) -> None:
        """Prepare the store (create indexes); safe to call any number of times."""

    async def close(self) -> None:
        """Release what the store holds open. The store is not used afterwards."""

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
    ) -> bool:
        """End a pass: clear ``inflight`` and ``open_pass``, free the run's lease (unless
        ``keep_lease``: the pass goes on, as a failing run compensates), journal
        ``outcomes`` and drop the ``forget`` keys as :meth:`start_step` does, and, when
        ``status`` is given, move the run to it (with ``output`` and ``error``). Lands
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
    ) -> RunRecord | None:
        """Move the run to ``status`` if it is in one of ``expect`` (not fenced by token:
        this is how cancel, suspend and resume act on a run a pass may hold). Sets
        ``error`` when given and ``pending_pass`` when asked, adds ``"*"`` (everything)
        to ``changed``, and drops the ``forget`` keys from the journal. Returns the run
        after the write, or None when the guard failed or the run does not exist."""

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

    # ---- flow control: queues, delays, deadlines ---------------------------------

    async def get_queue_state(self, name: str) -> QueueState | None:
        """The queue's admission state, or None when nothing was admitted through it."""

    async def save_queue_state(self, state: QueueState, *, expect_version: int) -> bool:
        """Replace the queue's state with ``state`` (whose ``version`` is
        ``expect_version + 1``) if its stored version is still ``expect_version`` (0:
        none stored). Of racing savers with one expected version exactly one lands."""

    async def queued_runs(
        self, queue: str, *, limit: int, after: LinePage | None = None
    ) -> list[RunRecord]:
        """Up to ``limit`` runs waiting in the queue's line (``queued``, on ``queue``,
        ``not_before`` cleared), in admission order: ``priority``, ``created_at``, run
        id, starting strictly after ``after``. Costs O(limit) whatever the line's length."""

    async def admit_runs(self, runs: Sequence[RunRecord]) -> int:
        """Move each of these runs (as read from the line) that is still ``queued`` with
        no ``not_before`` to ``running``, owed a pass, out of its line and among its
        queue's admitted runs. Returns how many moved."""

    async def count_admitted(self, queue: str) -> int:
        """How many runs of the queue were admitted and have not ended (status neither
        ``queued`` nor terminal). Costs an index range of that many entries."""

    async def count_admitted_keys(
        self, queue: str, keys: Sequence[str | None]
    ) -> dict[str | None, int]:
        """How many runs of the queue with each of these keys (None: no key) were
        admitted and have not ended; a key with none is absent."""

    async def admit_run_holding(
        self, run: RunRecord, *, holder: str, ttl: float
    ) -> RunRecord | None:
        """Admit ``run`` (as read from its line) and begin its first pass under
        ``holder``'s lease in the same write: move it to ``running`` out of its line, add
        one to ``token`` and ``passes``, set ``open_pass`` and the lease, leave no pass
        owed, among its queue's admitted runs. Lands only if the run is still ``queued``
        in its line with the token it was read with. Returns the run as begun, or None."""

    async def find_delayed_runs(self, before: datetime, limit: int) -> list[RunRecord]:
        """Up to ``limit`` ``queued`` runs whose ``not_before`` is earlier than
        ``before``, earliest first."""

    async def release_delayed_runs(self, runs: Sequence[RunRecord]) -> list[RunRecord]:
        """Clear ``not_before`` of each of these runs (as :meth:`find_delayed_runs` read
        them) that is still ``queued`` with one: a run on a queue joins its line, a run
        without one moves to ``running``, owed a pass. Returns the runs this call
        released, as they are after the write (of concurrent calls, one releases each)."""

    async def dedup_holder(self, queue: str | None, dedup_id: str) -> str | None:
        """The id of the run that is not terminal holding (``queue``, ``dedup_id``), or
        None when the pair is free."""

    async def reenter_run(
        self, run: RunRecord, *, expect: Sequence[RunState], forget: Iterable[str] = ()
    ) -> RunRecord | None:
        """Put a run back into flow control as ``run`` describes it (see
        ``engine_core.run.reentry``), if the stored run is in one of ``expect``: in one
        atomic write set its ``status`` (``queued``: in its queue's line, as a start
        puts it; or ``running``), ``pending_pass``, ``deadline_at`` and ``deadline_s``,
        clear ``not_before``, add ``"*"`` to ``changed``, drop the ``forget`` keys from
        the journal, and take its (``queue``, ``dedup_id``) pair again. While another run
        that is not terminal holds the pair, nothing is written and
        :class:`~engine_core.DuplicateRunError` names that run (of concurrent takers of
        one pair, exactly one lands, as for :meth:`insert_run`). Returns the run after
        the write, or None when the guard failed or the run does not exist."""

    async def find_deadlines(self, before: datetime, limit: int) -> list[RunRecord]:
        """Up to ``limit`` runs that are not terminal whose ``deadline_at`` is earlier
        than ``before``, earliest first."""

    async def count_queue(self, queue: str) -> dict[str, int]:
        """How many runs of the queue are in each status that is not terminal."""

    async def queue_names(self) -> list[str]:
        """The names of the queues that hold runs not yet ended or have a state, sorted."""

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

    # ---- events -----------------------------------------------------------------

    async def insert_event(self, event: EventRecord) -> None:
        """Keep an event for the run until a wait consumes it."""

    async def consume_event(self, run_id: str, name: str, consumer: str) -> EventRecord | None:
        """The event ``consumer`` took already, else the oldest unconsumed event of
        that name, marked consumed by ``consumer`` (atomically; two consumers never
        take one event). None when there is none."""

    # ---- streams (docs/guides/streams.md; engine_core.streams) -----------------

    async def append_stream(self, entry: StreamEntry) -> StreamEntry | None:
        """Insert ``entry`` at its stream position unless taken: None when this call
        inserted it (also when a repeat after a lost reply finds its own first try), else
        the entry holding the position. Of concurrent appends at a position one lands."""

    async def stream_entries(
        self, run_id: str, key: str, *, offset: int, limit: int
    ) -> list[StreamEntry]:
        """Up to ``limit`` entries of the stream from position ``offset`` on, in order of
        position (one query, served by an index)."""

    async def stream_length(self, run_id: str, key: str) -> int:
        """One more than the stream's highest position; 0 for a stream with no entry."""

    async def list_streams(self, run_id: str) -> list[str]:
        """The keys of the run's streams that have an entry, sorted."""

    def stream_hints(self, run_id: str) -> AsyncIterator[None] | None:
        """Wake-ups for readers of the run's streams: yields when an entry of the run may
        have been appended by any process (a hint, never a promise), or None when the
        store has no way to tell; readers then poll with a backoff."""

    async def put_heartbeat(self, run_id: str, key: str, *, attempt: int, details: Any) -> None:
        """Keep ``details`` as the last heartbeat of step ``key`` (from ``attempt``),
        replacing the one kept, unless that one is from a later attempt."""

    async def get_heartbeat(self, run_id: str, key: str) -> tuple[int, Any] | None:
        """The attempt and details of step ``key``'s last heartbeat, or None."""

    # ---- leases -----------------------------------------------------------------

    async def acquire_lease(self, key: str, holder: str, ttl: float) -> Lease | None:
        """Take the lease ``key`` for ``ttl`` seconds if it is free or expired (judged by
        comparing ``expires_at`` with now, never by TTL deletion). Each acquisition
        makes the token one higher than the last one issued for this key. Returns
        None when another holder's lease is still live."""

    async def refresh_lease(self, lease: Lease, ttl: float) -> Lease | None:
        """Extend a lease still held with this token; None when it was lost."""

    async def release_lease(self, lease: Lease) -> None:
        """Give the lease up if still held with this token; otherwise do nothing."""

    # ---- operating (the dashboard) ----------------------------------------------

    async def count_runs(self, *, workflow: str | None = None) -> dict[str, int]:
        """How many runs (of ``workflow``, when given) there are in each status; a status
        with no run is absent. Must not read every run document where the storage can
        count another way (one aggregation, an index)."""

    async def list_workflows(self) -> list[str]:
        """The names of the workflows of the stored runs, sorted, each once."""

    # ---- declared queue limits -------------------------------------------------

    async def put_queue_limits(self, name: str, limits: dict[str, Any]) -> None:
        """Store the limits queue ``name`` was declared with (JSON-shaped:
        ``concurrency``, ``worker_concurrency``, ``key_concurrency``, ``rate``),
        replacing what was stored for it (an upsert: repeating it is harmless)."""

    async def list_queue_limits(self) -> dict[str, dict[str, Any]]:
        """Every queue's stored limits, by queue name."""

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
