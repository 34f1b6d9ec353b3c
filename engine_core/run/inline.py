"""Inline steps: run in the orchestrating process, under the run's lease, with retries.

A step found in flight by the pass that holds the run was left by a pass that died
mid-step: it is counted as a failed attempt before the next one runs. Short retry
delays are waited out in memory; longer ones re-arm the step durably and park.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import engine_core.lifecycle_log as lifecycle_log
from engine_core.convert import from_json
from engine_core.durations import (
    Duration,
    check_retry_delay,
    parse_duration,
    retry_delay_seconds,
)
from engine_core.errors import NotSerializableError, RecordTooLargeError, StepFailedError
from engine_core.lifecycle_log import fields
from engine_core.records import StepKind, utcnow
from engine_core.run.attempt import error_info, run_attempt
from engine_core.run.divergence import callable_name
from engine_core.run.fork import step_idempotency_key
from engine_core.run.pass_state import PassState
from engine_core.run.signals import Parked, stored_failure
from engine_core.run.step_info import StepInfo
from engine_core.run.streams import AttemptStreams, previous_heartbeat
from engine_core.run.threads import runs_in_thread
from engine_core.run.transitions import attempt_ended, attempt_lost, lost_message
from engine_core.values import check_retries


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
    compensable = compensate is not None
    run = run_inline(
        p, key, fn, args, attempts, delay, limit, compensable, kwargs=kwargs, declared=declared
    )
    return await p.track(run)


async def _take_back_lost(p: PassState, key: str, kind: StepKind, extra: dict[str, Any]) -> int:
    """Count the attempt a dead pass left in flight; returns its number."""
    lost = p.run.inflight[key]
    # Our pass owns the lease, so an attempt still marked in flight belongs to a pass
    # that died mid-step.
    max_attempts = int(extra["max_attempts"])
    exhausted = lost.attempt >= max_attempts
    log.warning(
        "run %s: step %r: %s",
        p.run_id,
        key,
        lost_message(key, lost.attempt, max_attempts),
        extra=fields(p.run_id, p.workflow, key, p.traceparent),
    )
    transition = attempt_lost(
        kind, key, lost.attempt, max_attempts, started_at=lost.started_at, extra=extra
    )
    recorded = p.record(key, transition)
    if exhausted:
        raise stored_failure(recorded)
    return lost.attempt


async def run_inline(
    p: PassState,
    key: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    max_attempts: int,
    delay: float | str,
    timeout: float | None,
    compensable: bool,
    *,
    kind: StepKind = "inline",
    kwargs: dict[str, Any] | None = None,
    declared: Any = None,
) -> Any:
    """Run the step here until it succeeds, fails for good, or parks for a long retry."""
    step = p.steps.get(key)
    if step is not None and step.status == "succeeded":
        return step.result
    if step is not None and step.status == "failed":
        raise stored_failure(step)
    extra = {"max_attempts": max_attempts, "retry_delay": delay, "compensable": compensable}
    prior = step.attempts if step is not None else 0
    lost = p.run.inflight.get(key)
    if lost is not None and lost.attempt > prior:
        prior = await _take_back_lost(p, key, kind, extra)
    elif step is not None and step.status == "scheduled" and step.due_at is not None:
        if step.due_at > utcnow():  # a retry waiting out a long delay
            p.arm_timer(step.due_at)
            raise Parked()
    attempt = prior + 1
    threaded = runs_in_thread(fn)
    attributes = {
        "workflow.run_id": p.run_id,
        "workflow.name": p.workflow,
        "workflow.step": key,
    }
    while True:
        started = await p.start(key, attempt)
        info = StepInfo(
            p.run_id,
            key,
            attempt,
            step_idempotency_key(p.run, key),
            last_heartbeat=await previous_heartbeat(p.store, p.run_id, key, attempt),
        )
        try:
            stored = await run_attempt(
                info,
                (lambda: fn(*args, **kwargs)) if kwargs else (lambda: fn(*args)),
                threaded=threaded,
                hooks=AttemptStreams(p.store),
                slots=p.runtime.slots,
                timeout=timeout,
                traceparent=p.traceparent,
                attributes={**attributes, "workflow.attempt": attempt},
            )
            if declared is not None:
                check_declared(stored, declared, f"the result of step {key!r}")
        except Exception as exc:
            error = error_info(exc)
            if attempt < max_attempts and not isinstance(exc, NotSerializableError):
                wait = retry_delay_seconds(delay, attempt, random.random())
                lifecycle_log.attempt_will_retry(
                    p.run_id, p.workflow, key, p.traceparent, attempt, max_attempts, error, wait
                )
                if wait <= INLINE_RETRY_LIMIT_S:
                    outcome = attempt_ended(
                        kind, attempt, "pending", started_at=started, error=error, extra=extra
                    )
                    p.record(key, outcome)
                    await asyncio.sleep(wait)
                    attempt += 1
                    continue
                due = utcnow() + timedelta(seconds=wait)
                outcome = attempt_ended(
                    kind,
                    attempt,
                    "scheduled",
                    started_at=started,
                    error=error,
                    due_at=due,
                    extra=extra,
                )
                p.record(key, outcome)
                p.arm_timer(due)
                raise Parked() from None
            outcome = attempt_ended(
                kind, attempt, "failed", started_at=started, error=error, extra=extra
            )
            p.record(key, outcome)
            raise StepFailedError(key, attempt, type(exc).__name__, error["message"]) from exc
        outcome = attempt_ended(
            kind, attempt, "succeeded", started_at=started, result=stored, extra=extra
        )
        try:
            await p.record_stored(key, outcome)
        except RecordTooLargeError as exc:
            # The store cannot keep this outcome at all: the step fails with that (not
            # retried: the same result would be refused again).
            error = error_info(exc)
            refused = attempt_ended(
                kind, attempt, "failed", started_at=started, error=error, extra=extra
            )
            p.record(key, refused)
            raise StepFailedError(key, attempt, type(exc).__name__, error["message"]) from exc
        return stored
