"""A run that ended going live again (``engine.retry``; a later ``fork`` calls the same):
it re-enters its queue, its dedup id and its deadline as a start would.

A run keeps its flow-control fields when it ends (``queue``, ``queue_key``,
``priority``, ``dedup_id`` and ``deadline_s``, the deadline duration it was started
with); what it gives up is what only a live run holds: its place among its queue's
admitted runs, its dedup id, its armed deadline. Re-entering takes them back:

- on a queue, the run goes back to ``queued`` in its line (by its priority and its
  original start time) and is admitted again under the queue's limits; off a queue it
  is ``running`` and owed a pass at once;
- its dedup id is taken again; while another run that has not ended holds it, the
  re-entry raises :class:`~engine_core.DuplicateRunError` naming that run and
  changes nothing;
- its deadline is a fresh window of the duration it was started with, counted from
  the re-entry (a retry gets the time a start would, not a due time long past);
- a ``delay`` is not waited out again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from engine_core.common.runtime import Runtime
from engine_core.errors import DuplicateRunError
from engine_core.mirror import mirror_run
from engine_core.records import RunRecord, RunState
from engine_core.store import Store


def deadline_seconds(run: RunRecord) -> float | None:
    """The ``deadline`` duration the run was started with. Runs stored before the
    duration was kept never had their deadline moved, so it is their due time less
    their start time."""
    if run.deadline_s is not None:
        return run.deadline_s
    if run.deadline_at is not None:
        return max(0.0, (run.deadline_at - run.created_at).total_seconds())
    return None


def reentering(run: RunRecord, now: datetime) -> RunRecord:
    """``run`` as it goes live again at ``now`` (see the module's docstring)."""
    window = deadline_seconds(run)
    on_queue = run.queue is not None
    return replace(
        run,
        status="queued" if on_queue else "running",
        pending_pass=not on_queue,
        not_before=None,
        deadline_s=window,
        deadline_at=now + timedelta(seconds=window) if window is not None else None,
        updated_at=now,
    )


async def check_dedup_free(store: Store, run: RunRecord) -> None:
    """Raise :class:`~engine_core.DuplicateRunError` when another run that has not
    ended holds the run's dedup id (a check before anything is written; the re-entry's
    own write checks again, atomically)."""
    if run.dedup_id is None:
        return
    holder = await store.dedup_holder(run.queue, run.dedup_id)
    if holder is not None and holder != run.run_id:
        raise DuplicateRunError(
            f"run {holder!r} holds dedup id {run.dedup_id!r}"
            + (f" on queue {run.queue!r}" if run.queue else "")
            + f" and has not ended, so run {run.run_id!r} cannot take it again",
            run_id=holder,
        )


async def reenter(
    store: Store,
    runtime: Runtime,
    run: RunRecord,
    *,
    expect: Sequence[RunState],
    forget: Iterable[str] = (),
) -> RunRecord | None:
    """Put ``run`` (in one of ``expect``) back into its queue, dedup id and deadline in
    one write, then mirror it and tell this process (its deadline armed, its queue's admitter poked,
    or the run driven). Returns the run as stored after, or None when it was no longer
    in one of ``expect``; raises :class:`~engine_core.DuplicateRunError` (writing
    nothing) when another live run holds its dedup id."""
    now = runtime.clock.now()
    updated = await store.reenter_run(reentering(run, now), expect=expect, forget=forget)
    if updated is not None:
        await mirror_run(runtime.mirror, updated)
        runtime.reentered(updated)
    return updated
