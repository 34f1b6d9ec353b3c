"""Inline steps: run in the orchestrating process, under the run's lease, with retries.

A step found in flight by the pass that holds the run was left by a pass that died
mid-step: it is counted as a failed attempt before the next one runs. Short retry
delays are waited out in memory; longer ones re-arm the step durably and park (so do
short ones on a virtual clock, which moves only while no pass runs).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import engine_core.common.lifecycle_log as lifecycle_log
from engine_core.common.convert import from_json
from engine_core.common.durations import (
    Duration,
    check_retry_delay,
    parse_duration,
    retry_delay_seconds,
)
from engine_core.common.lifecycle_log import fields
from engine_core.common.values import check_retries, value_limit
from engine_core.errors import NotSerializableError, RecordTooLargeError, StepFailedError
from engine_core.records import StepKind, StepRecord
from engine_core.run.attempt import error_info, run_attempt
from engine_core.run.divergence import callable_name
from engine_core.run.fork import step_idempotency_key
from engine_core.run.pass_state import PassState
from engine_core.run.signals import Parked, stored_failure
from engine_core.run.step_info import StepInfo
from engine_core.run.streams import AttemptStreams, previous_heartbeat
from engine_core.run.threads import runs_in_thread
from engine_core.run.transitions import attempt_ended, attempt_lost, lost_message


def check_declared(stored: Any, declared: Any, what: str) -> None:
    """Raise :class:`NotSerializableError` when a fresh value, as it will be stored,
    cannot be given back as the ``declared`` type (every replay would refuse it)."""
    try:
        from_json(stored, declared)
    except (ValueError, TypeError) as exc:
        name = getattr(declared, "__name__", str(declared))
        raise NotSerializableError(
            f"{what} does not fit the type the code declares ({name}): {exc}; return a "
            "value of that type, or declare the type the step returns"
        ) from exc


log = logging.getLogger("engine_core")

#: Retry delays up to this long are waited out in memory, under the run's lease;
#: longer ones re-arm the step durably and end the pass.
INLINE_RETRY_LIMIT_S = 1.0


@dataclass(frozen=True, kw_only=True)
class InlineSpec:
    """How one inline step runs: its key, its callable and arguments, and its options
    as checked (named, so no two of them can be swapped unnoticed)."""

    key: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any] | None = None
    max_attempts: int
    delay: float | str
    timeout: float | None
    compensable: bool
    kind: StepKind = "inline"
    #: The type the code declares the step returns (a fresh result must fit it).
    declared: Any = None

    def extra(self) -> dict[str, Any]:
        """The options its step record keeps."""
        return {
            "max_attempts": self.max_attempts,
            "retry_delay": self.delay,
            "compensable": self.compensable,
        }

    def call(self) -> Any:
        """Call the step's callable with its arguments."""
        return self.fn(*self.args, **self.kwargs) if self.kwargs else self.fn(*self.args)


async def inline_step(
    p: PassState,
    name: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    *,
    retries: int,
    retry_delay: Duration,
    compensate: Callable[[Any], Any] | None,
    timeout: Duration | None,
    kwargs: dict[str, Any] | None = None,
    declared: Any = None,
) -> Any:
    """``ctx.step``: the recorded result, or run the step here now (a fresh result that
    does not fit the ``declared`` type fails the step, as a value that cannot be
    stored does, instead of being recorded)."""
    key = p.key(name)
    if (check := p.checks.reach(key, "inline", callable_name(fn))) is not None:
        await check
    attempts = check_retries(retries) + 1
    delay = check_retry_delay(retry_delay)
    limit = parse_duration(timeout, what="timeout") if timeout is not None else None
    if compensate is not None:
        p.compensations[key] = compensate
    done = p.finished(key)
    if done is not None:
        return done.result
    spec = InlineSpec(
        key=key,
        fn=fn,
        args=args,
        kwargs=kwargs,
        max_attempts=attempts,
        delay=delay,
        timeout=limit,
        compensable=compensate is not None,
        declared=declared,
    )
    return await p.track(run_inline(p, spec))


async def _take_back_lost(p: PassState, spec: InlineSpec) -> int:
    """Count the attempt a dead pass left in flight; returns its number."""
    key = spec.key
    lost = p.run.inflight[key]
    # Our pass owns the lease, so an attempt still marked in flight belongs to a pass
    # that died mid-step.
    exhausted = lost.attempt >= spec.max_attempts
    log.warning(
        "run %s: step %r: %s",
        p.run_id,
        key,
        lost_message(key, lost.attempt, spec.max_attempts),
        extra=fields(p.run_id, p.workflow, key, p.traceparent),
    )
    transition = attempt_lost(
        spec.kind,
        key,
        lost.attempt,
        spec.max_attempts,
        started_at=lost.started_at,
        extra=spec.extra(),
        now=p.clock.now(),
    )
    recorded = p.record(key, transition)
    if exhausted:
        raise stored_failure(recorded)
    return lost.attempt


async def run_inline(p: PassState, spec: InlineSpec) -> Any:
    """Run the step here until it succeeds, fails for good, or parks for a long retry."""
    step = p.steps.get(spec.key)
    if step is not None and step.status == "succeeded":
        return step.result
    if step is not None and step.status == "failed":
        raise stored_failure(step)
    attempt = await _first_attempt(p, spec, step)
    threaded = runs_in_thread(spec.fn)
    while True:
        started = await p.start(spec.key, attempt)
        try:
            stored = await _attempt(p, spec, attempt, threaded=threaded)
        except Exception as exc:
            await _failed(p, spec, attempt, started=started, exc=exc)
            attempt += 1  # retried soon, here
            continue
        await _succeeded(p, spec, attempt, started=started, stored=stored)
        return stored


async def _first_attempt(p: PassState, spec: InlineSpec, step: StepRecord | None) -> int:
    """The number of the attempt to run now: after those recorded, and after one a dead
    pass left in flight (counted lost). A retry still waiting out a long delay parks."""
    prior = step.attempts if step is not None else 0
    lost = p.run.inflight.get(spec.key)
    if lost is not None and lost.attempt > prior:
        prior = await _take_back_lost(p, spec)
    elif step is not None and step.status == "scheduled" and step.due_at is not None:
        if step.due_at > p.clock.now():  # a retry waiting out a long delay
            p.arm_timer(step.due_at)
            raise Parked()
    return prior + 1


async def _attempt(p: PassState, spec: InlineSpec, attempt: int, *, threaded: bool) -> Any:
    """Run attempt ``attempt`` of the step; its result as it will be stored."""
    info = StepInfo(
        p.run_id,
        spec.key,
        attempt,
        step_idempotency_key(p.run, spec.key),
        last_heartbeat=await previous_heartbeat(p.store, p.run_id, spec.key, attempt),
    )
    attributes = {
        "workflow.run_id": p.run_id,
        "workflow.name": p.workflow,
        "workflow.step": spec.key,
        "workflow.attempt": attempt,
    }
    stored = await run_attempt(
        info,
        spec.call,
        threaded=threaded,
        hooks=AttemptStreams(p.store, p.clock),
        slots=p.runtime.slots,
        timeout=spec.timeout,
        traceparent=p.traceparent,
        attributes=attributes,
        limit=value_limit(p.store),
    )
    if spec.declared is not None:
        check_declared(stored, spec.declared, f"the result of step {spec.key!r}")
    return stored


async def _failed(
    p: PassState, spec: InlineSpec, attempt: int, *, started: datetime, exc: Exception
) -> None:
    """Record a failed attempt. Returns when the next attempt may run here now (after a
    short delay); parks for a long one; raises the step's failure when it is out of
    attempts (or its result can never be stored)."""
    error = error_info(exc)
    key, kind, extra = spec.key, spec.kind, spec.extra()
    clock = p.clock
    if attempt >= spec.max_attempts or isinstance(exc, NotSerializableError):
        ended = attempt_ended(
            kind, attempt, "failed", started_at=started, error=error, extra=extra, now=clock.now()
        )
        p.record(key, ended)
        raise StepFailedError(key, attempt, type(exc).__name__, error["message"]) from exc
    wait = retry_delay_seconds(spec.delay, attempt, random.random())
    lifecycle_log.attempt_will_retry(
        p.run_id, p.workflow, key, p.traceparent, attempt, spec.max_attempts, error, wait
    )
    if wait <= INLINE_RETRY_LIMIT_S and not clock.virtual:
        pending = attempt_ended(
            kind, attempt, "pending", started_at=started, error=error, extra=extra, now=clock.now()
        )
        p.record(key, pending)
        await asyncio.sleep(wait)  # the real clock's seconds
        return
    now = clock.now()
    due = now + timedelta(seconds=wait)
    outcome = attempt_ended(
        kind,
        attempt,
        "scheduled",
        started_at=started,
        error=error,
        due_at=due,
        extra=extra,
        now=now,
    )
    p.record(key, outcome)
    p.arm_timer(due)
    raise Parked() from None


async def _succeeded(
    p: PassState, spec: InlineSpec, attempt: int, *, started: datetime, stored: Any
) -> None:
    """Record the attempt's result, durably before the body sees it when it is too large
    for the run's journal; a result the store refuses fails the step (not retried: the
    same result would be refused again)."""
    key, kind, extra = spec.key, spec.kind, spec.extra()
    outcome = attempt_ended(
        kind,
        attempt,
        "succeeded",
        started_at=started,
        result=stored,
        extra=extra,
        now=p.clock.now(),
    )
    try:
        await p.record_stored(key, outcome)
    except RecordTooLargeError as exc:
        error = error_info(exc)
        refused = attempt_ended(
            kind, attempt, "failed", started_at=started, error=error, extra=extra, now=p.clock.now()
        )
        p.record(key, refused)
        raise StepFailedError(key, attempt, type(exc).__name__, error["message"]) from exc
