"""The step state machine: every transition of a step document, as a named function.

Each function returns a :class:`Transition`, the guard the stored step must match, the
changes to make, and the history entry to append. This module is the only place that
builds them; the callers write a transition with :func:`write` and, where they keep a
copy of the step, mirror it with :meth:`Transition.apply`. The outcomes of a pass's own
steps are applied by the pass and journaled (fenced by its token), not written here.

    pending  -> running (a pass or a claim starts an attempt)
    running  -> succeeded | failed | pending (retry soon) | scheduled (retry later)
    scheduled -> succeeded (a sleep woke, an event came, a child ended) | failed
    scheduled -> running (a worker claims a queue job) -> scheduled (put back)
    failed   -> pending | scheduled (``engine.retry`` gives one more attempt)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from engine_core.records import AttemptEntry, StepGuard, StepKind, StepRecord, StepState, utcnow
from engine_core.store import Store

#: How an attempt can end.
Outcome = Literal["pending", "scheduled", "succeeded", "failed"]
_ENDED = ("succeeded", "failed")


@dataclass(frozen=True)
class Transition:
    """One guarded write of a step document."""

    guard: StepGuard = field(default_factory=StepGuard)
    changes: dict[str, Any] = field(default_factory=dict)
    entry: AttemptEntry | None = None

    def apply(self, step: StepRecord) -> StepRecord:
        """Make the same change to a local copy of the step, as the store did."""
        for name, value in self.changes.items():
            setattr(step, name, value)
        if self.entry is not None:
            step.history.append(self.entry)
        return step


async def write(store: Store, run_id: str, key: str, transition: Transition) -> bool:
    """Write ``transition`` to the step; whether its guard held."""
    return await store.update_step(
        run_id,
        key,
        guard=transition.guard,
        changes=transition.changes,
        entry=transition.entry,
    )


def _entry(
    attempt: int,
    status: StepState,
    at: datetime,
    *,
    started_at: datetime | None = None,
    error: dict[str, Any] | None = None,
) -> AttemptEntry:
    # A failed attempt reads "failed" in the timeline even when the step retries.
    shown: StepState = "failed" if error is not None else status
    return AttemptEntry(attempt=attempt, status=shown, at=at, started_at=started_at, error=error)


# ---- inline attempts (written by the pass that holds the run) ------------------------


def attempt_ended(
    kind: StepKind,
    attempt: int,
    status: Outcome,
    *,
    started_at: datetime | None,
    result: Any = None,
    error: dict[str, Any] | None = None,
    due_at: datetime | None = None,
    extra: dict[str, Any] | None = None,
) -> Transition:
    """An inline attempt's outcome, recorded by the pass that holds the run (the pass's
    token fences it; see ``PassState.record``)."""
    now = utcnow()
    changes: dict[str, Any] = {
        "kind": kind,
        "status": status,
        "attempts": attempt,
        "result": result,
        "error": error,
        "due_at": due_at,
        "updated_at": now,
        **(extra or {}),
    }
    if status in _ENDED:
        changes["ended_at"] = now
    return Transition(
        changes=changes, entry=_entry(attempt, status, now, started_at=started_at, error=error)
    )


def lost_message(key: str, attempt: int, max_attempts: int) -> str:
    """Why an attempt lost with its process failed the step, or that it runs again: a
    step that takes its process down runs out of attempts like any other."""
    if attempt < max_attempts:
        return (
            f"the process running attempt {attempt} of step {key!r} stopped before "
            "recording its outcome; another attempt runs"
        )
    if max_attempts == 1:
        return (
            f"attempt {attempt} was lost with its process; the step allows no retries: "
            "set retries= to let another worker take it over"
        )
    return (
        f"attempt {attempt} was lost with its process, the last of the {max_attempts} the "
        "step allows: set a larger retries= to let another worker take it over"
    )


def attempt_lost(
    kind: StepKind,
    key: str,
    attempt: int,
    max_attempts: int,
    *,
    started_at: datetime,
    extra: dict[str, Any] | None = None,
) -> Transition:
    """An inline attempt whose pass died mid-step, found by the pass that holds the run
    now: counted, so a step that kills its process every time runs out of attempts."""
    error = {"type": "WorkerLost", "message": lost_message(key, attempt, max_attempts)}
    status: Outcome = "failed" if attempt >= max_attempts else "pending"
    return attempt_ended(kind, attempt, status, started_at=started_at, error=error, extra=extra)


# ---- steps settled by what they waited for ------------------------------------------


def woken(kind: StepKind, event: str | None, result: Any) -> Transition:
    """A scheduled step settles with ``result``: a sleep fell due, an event came, or a
    wait timed out (result None). Recorded by the pass that holds the run."""
    now = utcnow()
    changes: dict[str, Any] = {
        "kind": kind,
        "event": event,
        "status": "succeeded",
        "result": result,
        "attempts": 1,
        "updated_at": now,
        "ended_at": now,
    }
    return Transition(changes=changes, entry=AttemptEntry(attempt=1, status="succeeded", at=now))


def child_ended(
    child_id: str, status: str, output: Any, error: dict[str, Any] | None
) -> Transition:
    """The parent's child step settles with how its child run ended. Written
    ``notified=False`` until the parent is told (see :func:`told`)."""
    now = utcnow()
    changes: dict[str, Any] = {
        "attempts": 1,
        "updated_at": now,
        "ended_at": now,
        "notified": False,
    }
    if status == "completed":
        changes.update(status="succeeded", result=output, error=None)
    else:
        kind = "WorkflowRunCancelledError" if status == "cancelled" else "WorkflowRunFailedError"
        message = (error or {}).get("message") or f"child run {child_id!r} ended {status}"
        changes.update(status="failed", error={"type": kind, "message": message})
    return Transition(
        StepGuard(status_in=("scheduled",)),
        changes,
        AttemptEntry(attempt=1, status=changes["status"], at=now, error=changes.get("error")),
    )


def told() -> Transition:
    """The run was told that this step settled outside its passes."""
    return Transition(StepGuard(), {"notified": True})


def retried(step: StepRecord, *, halted: bool = False) -> Transition:
    """``engine.retry``: a failed step gets one more attempt (a dispatched one goes back
    on the queue; ``halted`` until its run's next pass, for a run waiting for admission)."""
    now = utcnow()
    changes: dict[str, Any] = {"updated_at": now, "max_attempts": step.attempts + 1}
    if step.kind == "dispatch":
        changes.update(status="scheduled", due_at=now, halted=halted)
    else:
        changes.update(status="pending")
    return Transition(StepGuard(status_in=("failed",)), changes)


# ---- queue jobs (written by the worker that claimed them) ---------------------------


def claimed(job: StepRecord, holder: str, ttl: float) -> Transition:
    """A queue job claimed by ``holder`` for ``ttl`` seconds: its next attempt runs."""
    now = utcnow()
    return Transition(
        StepGuard(status_in=("scheduled",), attempts=job.attempts),
        {
            "status": "running",
            "attempts": job.attempts + 1,
            "claim_holder": holder,
            "claim_expires_at": now + timedelta(seconds=ttl),
            "updated_at": now,
        },
    )


def claim_guard(job: StepRecord, holder: str) -> StepGuard:
    """The job is still running under this holder's claim of this attempt."""
    return StepGuard(status_in=("running",), attempts=job.attempts, claim_holder=holder)


def job_returned(job: StepRecord, holder: str) -> Transition:
    """A claimed job whose run was stopped goes back on the queue, halted, and its claim
    costs no attempt."""
    unclaimed = job_unclaimed(job, holder)
    return Transition(unclaimed.guard, {**unclaimed.changes, "halted": True})


def job_unclaimed(job: StepRecord, holder: str) -> Transition:
    """A job claimed by ``holder`` that never started (the claim's reply was lost) goes
    back on the queue; the claim costs no attempt."""
    return Transition(
        claim_guard(job, holder),
        {
            "status": "scheduled",
            "attempts": job.attempts - 1,
            "claim_holder": None,
            "claim_expires_at": None,
        },
    )


def job_ended(
    job: StepRecord,
    holder: str,
    status: Outcome,
    *,
    counted: int | None = None,
    result: Any = None,
    error: dict[str, Any] | None = None,
    due_at: datetime | None = None,
    started_at: datetime | None = None,
    told: bool = False,
) -> Transition:
    """A claimed job's outcome, fenced by the claim. A job that ends is written
    ``notified=False`` until its run is told, unless ``told``: its pass waits for it in
    this process and takes the outcome as it is written. ``counted`` overrides the
    attempts stored when they differ from the claim's (every attempt lost with its
    worker)."""
    now = utcnow()
    changes: dict[str, Any] = {
        "status": status,
        "result": result,
        "error": error,
        "updated_at": now,
        "claim_holder": None,
        "claim_expires_at": None,
    }
    if due_at is not None:
        changes["due_at"] = due_at
    if status in _ENDED:
        changes["ended_at"] = now
        changes["notified"] = told
    if counted is not None and counted != job.attempts:
        changes["attempts"] = counted
    return Transition(
        claim_guard(job, holder),
        changes,
        _entry(job.attempts, status, now, started_at=started_at, error=error),
    )
