"""What ``engine.status``, ``engine.history`` and ``engine.replay_check`` return."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from engine_core.journal import merged_steps
from engine_core.records import ACTIVE, RunRecord, StepRecord
from engine_core.tracing import trace_id_of


@dataclass(frozen=True)
class StepStatus:
    """A step folded to its latest attempt."""

    status: str
    attempts: int
    result: Any = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True)
class RunStatus:
    """A run's status with each of its steps folded to its latest attempt."""

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


def fold_status(run: RunRecord, steps: list[StepRecord]) -> RunStatus:
    """The run's status from its record and its step records (and its journal)."""
    folded: dict[str, StepStatus] = {}
    for step in sorted(merged_steps(run, steps), key=_first_seen):
        folded[step.key] = StepStatus(step.status, step.attempts, step.result, step.error)
    if run.status in ACTIVE:
        # An inline attempt in progress lives on the run until its outcome lands.
        for key, inflight in run.inflight.items():
            known = folded.get(key)
            if inflight.attempt > (known.attempts if known else 0):
                folded[key] = StepStatus("running", inflight.attempt)
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
    )


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
