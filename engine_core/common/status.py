"""What ``engine.status``, ``engine.history`` and ``engine.replay_check`` return."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from engine_core.common.journal import merged_steps
from engine_core.records import ACTIVE, PATCH_PREFIX, TERMINAL, RunRecord, StepRecord
from engine_core.tracing import trace_id_of


@dataclass(frozen=True)
class StepStatus:
    """A step folded to its latest attempt."""

    status: str
    attempts: int
    result: Any = None
    error: dict[str, Any] | None = None
    #: What the step is: inline, dispatch, sleep, event, child or compensation.
    kind: str | None = None
    #: For a ``scheduled`` step, what it waits for, in words: "event 'approval'",
    #: "sleep until 2026-12-03T10:00:00Z", "child run 'x'", "a worker to run 'f'"...
    waiting_for: str | None = None
    #: For an event wait, the event's name.
    event: str | None = None


@dataclass(frozen=True)
class RunStatus:
    """A run's status with each of its steps folded to its latest attempt.

    A list of runs (``list_runs``, ``list_children``) leaves ``steps`` empty: they are
    read with ``status``, complete, never in part."""

    run_id: str
    workflow: str
    status: str
    output: Any
    error: dict[str, Any] | None
    steps: dict[str, StepStatus] = field(default_factory=dict)
    parent_run_id: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    input: Any = None
    parent_step: str | None = None
    #: The run's W3C trace id (32 hex digits), to look the run up in a tracing backend.
    trace_id: str | None = None
    #: Flow control, as started: the queue, key and priority; when a delayed start is
    #: due (None once released); the deadline.
    queue: str | None = None
    queue_key: str | None = None
    priority: int = 0
    not_before: datetime | None = None
    deadline_at: datetime | None = None
    #: The ``version=`` label of the code that started the run, if any.
    version: str | None = None
    #: A fork's origin, ``{"run_id", "step"}`` (``engine.fork``); None otherwise.
    forked_from: dict[str, str] | None = None
    #: How many forks were made of this run (``engine.status`` counts them; a listing
    #: leaves 0). ``engine.list_forks`` lists them.
    forks: int = 0
    #: The patches the run took (``ctx.patched`` returned True and left a marker), by
    #: id, in the order it reached them; the markers are not steps.
    patches: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class QueueStatus:
    """A declared queue: its limits and what it holds now."""

    name: str
    concurrency: int | None
    worker_concurrency: int | None
    key_concurrency: int | None
    rate: str | None
    #: Runs waiting for admission (including delayed ones).
    queued: int
    #: Runs admitted and not ended (each holds a slot).
    active: int
    admitted_last_minute: int
    admitted_this_minute: int


@dataclass(frozen=True)
class TimelineEntry:
    """One transition of one step attempt."""

    step: str
    attempt: int
    status: str
    at: datetime
    error: dict[str, Any] | None = None


def fold_status(run: RunRecord, steps: list[StepRecord] | None) -> RunStatus:
    """The run's status from its record and its step records (and its journal);
    ``steps=None`` (a listing): without steps, since the journal alone is a part."""
    folded: dict[str, StepStatus] = {}
    patches: list[str] = []
    ended = run.status in TERMINAL
    for step in sorted(merged_steps(run, steps) if steps is not None else [], key=_first_seen):
        if step.kind == "patch":
            patches.append(step.key.removeprefix(PATCH_PREFIX))
            continue
        state: str = step.status
        waiting = _waiting_for(step)
        if ended and state not in ("succeeded", "failed"):
            # The run ended while the step was unfinished: it will never run or wake.
            state, waiting = "cancelled", None
        folded[step.key] = StepStatus(
            state,
            step.attempts,
            step.result,
            step.error,
            kind=step.kind,
            waiting_for=waiting,
            event=step.event if step.kind == "event" else None,
        )
    if steps is not None and run.status in ACTIVE:
        # An inline attempt in progress lives on the run until its outcome lands.
        for key, inflight in run.inflight.items():
            known = folded.get(key)
            if inflight.attempt > (known.attempts if known else 0):
                folded[key] = StepStatus("running", inflight.attempt, kind="inline")
    return RunStatus(
        run_id=run.run_id,
        workflow=run.workflow,
        status=run.status,
        output=run.output,
        error=run.error,
        steps=folded,
        parent_run_id=run.parent_run_id,
        created_at=run.created_at,
        updated_at=run.updated_at,
        input=run.input,
        parent_step=run.parent_step,
        trace_id=trace_id_of(run.wire.get("traceparent")),
        queue=run.queue,
        queue_key=run.queue_key,
        priority=run.priority,
        not_before=run.not_before,
        deadline_at=run.deadline_at,
        version=run.version,
        forked_from=dict(run.forked_from) if run.forked_from else None,
        patches=patches,
    )


def _waiting_for(step: StepRecord) -> str | None:
    """What a scheduled step waits for, in words (None when it waits for nothing)."""
    if step.status != "scheduled":
        return None
    due = _moment(step.due_at)
    if step.kind == "event":
        what = f"event {step.event!r}"
        return f"{what} (times out at {due})" if due else what
    if step.kind == "sleep":
        return f"sleep until {due}" if due else "sleep"
    if step.kind == "child":
        return f"child run {step.child_run_id!r}"
    if step.kind == "dispatch" and (step.attempts == 0 or due is None):
        return f"a worker to run step function {step.function!r}"
    return f"retry at {due}" if due else None


def _moment(at: datetime | None) -> str | None:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if at is not None else None


def _first_seen(step: StepRecord) -> tuple[datetime, str]:
    """When the step first showed up, so steps read in the order the run reached them."""
    moments = [step.scheduled_at, *(e.started_at or e.at for e in step.history[:1])]
    known = [m for m in moments if m is not None]
    return (min(known) if known else step.updated_at or datetime.max.replace(tzinfo=UTC), step.key)


def timeline(run: RunRecord, steps: list[StepRecord]) -> list[TimelineEntry]:
    """Every recorded transition of every attempt, oldest first."""
    # In the order the run reached them, so that entries at the same moment keep it.
    steps = sorted(merged_steps(run, steps), key=_first_seen)
    entries: list[TimelineEntry] = []
    for step in steps:
        if step.scheduled_at is not None:
            entries.append(TimelineEntry(step.key, 0, "scheduled", step.scheduled_at))
        for item in step.history:
            if item.started_at is not None:
                entries.append(TimelineEntry(step.key, item.attempt, "running", item.started_at))
            entries.append(TimelineEntry(step.key, item.attempt, item.status, item.at, item.error))
    if run.status in ACTIVE:
        for key, inflight in run.inflight.items():
            known = next((s for s in steps if s.key == key), None)
            if inflight.attempt > (known.attempts if known else 0):
                entries.append(TimelineEntry(key, inflight.attempt, "running", inflight.started_at))
    entries.sort(key=lambda e: e.at)  # stable: ties keep step order, then attempt order
    return entries


@dataclass(frozen=True)
class Divergence:
    """A stored run that this code would not replay as recorded: at ``step``, the
    record holds ``recorded`` and the code ``found``; ``reason`` says how they part."""

    run_id: str
    step: str
    recorded: str
    found: str
    reason: str


@dataclass
class ReplayReport:
    """What ``engine.replay_check`` found: how many runs it replayed, and which of them
    would diverge."""

    checked: int
    diverged: list[Divergence] = field(default_factory=list)


@dataclass(frozen=True)
class ForkPlan:
    """What ``engine.fork(run_id, from_step=...)`` would make of the run: the step it
    runs anew from, the steps it copies (their recorded results reused, never run
    again) and the steps that run again, each by key in the order the run first
    started them. ``compensated``: of those that run again before ``from_step``, the
    ones whose compensation ran in the original (their effect was undone)."""

    run_id: str
    from_step: str
    copied: list[str]
    run_again: list[str]
    compensated: list[str] = field(default_factory=list)
