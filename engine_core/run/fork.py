"""``engine.fork``: a new run of a run's workflow that reuses the steps the original
finished before a chosen step, and runs that step and all after it anew.

What is copied, by the order in which the original first started its steps:

- every step that finished (succeeded, or failed and was caught by the body) before
  ``from_step``, child steps included: the fork reads their recorded results and never
  runs them again (a finished child step keeps pointing at the original's child, so no
  duplicate child starts);
- every patch marker (which code path the run took is a fact of its input and history).

Not copied: ``from_step`` and every step started at or after it, every step started
together with it (the batch of tasks the body created that it ran under: the members of
one ``asyncio.gather`` are one group, see ``engine_core.run.branches``), unfinished
steps, every step whose compensation ran in the original (its effect was undone: a
charge refunded is no charge to ship on, so the fork runs it anew), and compensations
(a copied step is not ``compensable`` in the fork: its effect belongs to the original,
which compensates it, or not, itself). A step that runs anew before copied ones takes
the place it had in the run's order (see ``engine_core.run.divergence``: a step whose
record is missing), so the fork replays as the original did. Steps that run again get new
idempotency keys, since they belong to a new run id, unless the fork keeps its
original's (``keep_idempotency_keys=True``, stored in the run's ``wire``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from engine_core.common.journal import merged_steps
from engine_core.common.status import ForkPlan
from engine_core.common.values import idempotency_key
from engine_core.errors import StepNotFoundError
from engine_core.records import RunRecord, StepRecord
from engine_core.run.keys import compensation_key
from engine_core.run.reentry import deadline_seconds
from engine_core.tracing import new_run_traceparent

#: ``engine.fork(input=UNCHANGED)``: the fork starts with the original's input.
UNCHANGED: Final[Any] = type("Unchanged", (), {"__repr__": lambda self: "UNCHANGED"})()
#: Where the run whose idempotency keys a fork's steps use is kept in its ``wire``.
KEYS_OF = "idempotency_of"
_FINISHED = ("succeeded", "failed")
_LATE = datetime.max.replace(tzinfo=UTC)


def step_idempotency_key(run: RunRecord, key: str) -> str:
    """The idempotency key of step ``key`` of ``run``: its own, or its original's for a
    fork that keeps them."""
    return idempotency_key(str(run.wire.get(KEYS_OF) or run.run_id), key)


def _first_started(step: StepRecord) -> tuple[bool, int, datetime, str]:
    moments = [step.scheduled_at, *(e.started_at or e.at for e in step.history[:1])]
    known = [m for m in moments if m is not None]
    first = min(known) if known else step.updated_at or _LATE
    return (step.order is None, step.order or 0, first, step.key)


def _is_body(step: StepRecord) -> bool:
    return step.kind not in ("compensation", "patch", "reply")


def fork_points(run: RunRecord, stored: Sequence[StepRecord]) -> list[StepRecord]:
    """The run's steps as a fork sees them: its records, and a step whose first attempt
    is in flight (an inline step running now, which has no record yet) as its in-flight
    mark tells it: every step ``engine.status`` lists."""
    steps = merged_steps(run, stored)
    known = {s.key for s in steps}
    for key, mark in run.inflight.items():
        if key not in known and mark.attempt > 0:
            steps.append(
                StepRecord(
                    run_id=run.run_id,
                    key=key,
                    kind="inline",
                    status="running",
                    attempts=mark.attempt,
                    scheduled_at=mark.started_at,
                    order=mark.order,
                    group=mark.group,
                )
            )
    return steps


def choose_from_step(run: RunRecord, steps: Sequence[StepRecord], from_step: str | None) -> str:
    """The key of the first step the fork runs anew ("" when the run has no step):
    ``from_step`` when given (:class:`StepNotFoundError` if the run has none of that
    key), else the step that failed the run, else its first step."""
    body = sorted((s for s in steps if _is_body(s)), key=_first_started)
    keys = {s.key for s in body}
    if from_step is not None:
        if from_step not in keys:
            known = ", ".join(repr(s.key) for s in body[:10]) or "none"
            raise StepNotFoundError(
                f"run {run.run_id!r} has no step {from_step!r} to fork from (its steps, "
                f"first started first: {known}); pass a step key as `engine.status` lists it"
            )
        return from_step
    failed = (run.error or {}).get("step")
    if isinstance(failed, str) and failed in keys:
        return failed
    for step in body:
        if step.status == "failed":
            return step.key
    return body[0].key if body else ""


def compensated(steps: Sequence[StepRecord]) -> set[str]:
    """The keys of the steps whose compensation ran (began, at least) in the run."""
    prefix = compensation_key("")
    return {s.key.removeprefix(prefix) for s in steps if s.kind == "compensation"}


def copied_steps(steps: Sequence[StepRecord], from_key: str, fork_id: str) -> list[StepRecord]:
    """The original's steps the fork reuses (see the module docstring), as records of
    ``fork_id``."""
    undone = compensated(steps)
    steps = [s for s in steps if s.key not in undone]
    by_key = {s.key: s for s in steps}
    start = by_key.get(from_key)
    limit = None
    if start is not None:
        # The first of the steps started together with ``from_step`` (its batch).
        together = [s for s in steps if start.group is not None and s.group == start.group]
        limit = min(map(_first_started, [start, *together]))
    kept: list[StepRecord] = []
    for step in steps:
        if step.kind == "patch":
            kept.append(_as_copy(step, fork_id))
        elif step.kind != "compensation" and step.status in _FINISHED:
            if limit is None or _before(step, limit):
                kept.append(_as_copy(step, fork_id))
    return kept


def _before(step: StepRecord, limit: tuple[bool, int, datetime, str]) -> bool:
    mine = _first_started(step)
    if mine[0] or limit[0]:
        # Records older than the order check: by when they first started.
        return (mine[2], mine[3]) < (limit[2], limit[3])
    return mine[1] < limit[1]  # steps started together share an order: all run again


def _as_copy(step: StepRecord, fork_id: str) -> StepRecord:
    return replace(
        step,
        run_id=fork_id,
        compensable=False,
        halted=False,
        claim_holder=None,
        claim_expires_at=None,
        notified=True,
        traceparent=None,
        history=list(step.history),
    )


def fork_record(
    run: RunRecord,
    *,
    fork_id: str | None,
    from_key: str,
    input: Any,
    started_by: str,
    keep_idempotency_keys: bool,
    now: datetime,
) -> RunRecord:
    """The fork's run, to insert: the original's workflow, version, queue (its key,
    priority and dedup id) and key scheme; a fresh deadline window of the same length;
    ``running`` and owed a pass, or ``queued`` in its queue's line."""
    window = deadline_seconds(run)
    wire: dict[str, Any] = {"traceparent": new_run_traceparent(), "started_by": started_by}
    if keep_idempotency_keys:
        wire[KEYS_OF] = run.wire.get(KEYS_OF) or run.run_id
    on_queue = run.queue is not None
    return RunRecord(
        run_id=fork_id or uuid.uuid4().hex,
        workflow=run.workflow,
        status="queued" if on_queue else "running",
        input=run.input if input is UNCHANGED else input,
        created_at=now,
        updated_at=now,
        wire=wire,
        pending_pass=not on_queue,
        key_scheme=run.key_scheme,
        queue=run.queue,
        queue_key=run.queue_key,
        priority=run.priority,
        dedup_id=run.dedup_id,
        deadline_s=window,
        deadline_at=now + timedelta(seconds=window) if window is not None else None,
        version=run.version,
        forked_from={"run_id": run.run_id, "step": from_key},
        retention=run.retention,
    )


def plan_fork(
    run: RunRecord,
    stored: Sequence[StepRecord],
    *,
    from_step: str | None,
    fork_id: str | None,
    input: Any,
    started_by: str,
    now: datetime,
    keep_idempotency_keys: bool = False,
) -> tuple[RunRecord, list[StepRecord]]:
    """The fork of ``run`` (whose step records are ``stored``) and its copied steps, made
    at ``now``."""
    steps = fork_points(run, stored)
    from_key = choose_from_step(run, steps, from_step)
    fork = fork_record(
        run,
        fork_id=fork_id,
        from_key=from_key,
        input=input,
        started_by=started_by,
        keep_idempotency_keys=keep_idempotency_keys,
        now=now,
    )
    return fork, copied_steps(steps, from_key, fork.run_id)


def describe_fork(
    run: RunRecord, stored: Sequence[StepRecord], *, from_step: str | None
) -> ForkPlan:
    """What :func:`plan_fork` would do, in words an operator reads before forking."""
    steps = fork_points(run, stored)
    from_key = choose_from_step(run, steps, from_step)
    kept = {s.key for s in copied_steps(steps, from_key, run.run_id)}
    body = [s.key for s in sorted(steps, key=_first_started) if _is_body(s)]
    undone = compensated(steps)
    again = [k for k in body if k not in kept]
    return ForkPlan(
        run_id=run.run_id,
        from_step=from_key,
        copied=[k for k in body if k in kept],
        run_again=again,
        compensated=[k for k in again if k in undone],
    )
