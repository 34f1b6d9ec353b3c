"""The store protocol's flow control: queues, delays, deadlines, dedup ids, and the
queue limits processes declare."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol

from engine_core.records import (
    LinePage,
    QueueState,
    RunRecord,
    RunState,
)


class FlowStore(Protocol):
    """Flow control: queues, delays, deadlines, dedup ids, declared limits (part of
    :class:`~engine_core.store.Store`)."""

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
        them) that is still ``queued`` with the same ``not_before`` (a debounced start
        may have moved it later since: that run stays): a run on a queue joins its line,
        a run without one moves to ``running``, owed a pass. A debounced run released
        ends its debounce window. Returns the runs this call released, as they are after
        the write (of concurrent calls, one releases each)."""

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
        clear ``not_before`` and ``expire_at`` (a live run never expires: nothing it
        owns may be deleted from then on), add ``"*"`` to ``changed``, drop the
        ``forget`` keys from the journal, and take its (``queue``, ``dedup_id``) pair
        again. While another run
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

    # ---- declared queue limits -------------------------------------------------

    async def put_queue_limits(self, name: str, limits: dict[str, Any]) -> None:
        """Store the limits queue ``name`` was declared with (JSON-shaped:
        ``concurrency``, ``worker_concurrency``, ``key_concurrency``, ``rate``),
        replacing what was stored for it (an upsert: repeating it is harmless)."""

    async def list_queue_limits(self) -> dict[str, dict[str, Any]]:
        """Every queue's stored limits, by queue name."""
