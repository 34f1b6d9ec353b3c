"""Running one attempt of a step, inline or dispatched, and how its failure is stored."""

from __future__ import annotations

import asyncio
import inspect
import traceback
from collections.abc import Callable
from typing import Any, cast

import engine_core.metrics as metrics
from engine_core.common.clock import real_seconds
from engine_core.common.values import MAX_VALUE_BYTES, to_stored
from engine_core.errors import StepFailedError
from engine_core.run.step_info import StepHooks, StepInfo, enter_step, leave_step
from engine_core.run.threads import call_in_thread
from engine_core.tracing import attempt_span, record_failure, tracing_configured

_STACK_LIMIT = 4000
#: Longer messages are cut (keeping their start and their end): an error is stored with
#: its step and its run, and must never make them too large to write.
MESSAGE_LIMIT = 32 * 1024


def bounded(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """``message``, cut in the middle when it is longer than ``limit`` characters."""
    if len(message) <= limit:
        return message
    half = limit // 2
    return f"{message[:half]} [... {len(message) - 2 * half} characters cut ...] {message[-half:]}"


def error_info(exc: BaseException) -> dict[str, Any]:
    """How an exception is stored: type, message, stack, and the step fields if any
    (message and stack bounded)."""
    stack = bounded("".join(traceback.format_exception(exc)), _STACK_LIMIT)
    info: dict[str, Any] = {
        "type": type(exc).__name__,
        "message": bounded(str(exc)),
        "stack": stack,
    }
    if isinstance(exc, StepFailedError):
        info.update(step=exc.step, attempts=exc.attempts, error_type=exc.error_type)
    return info


async def run_attempt(
    info: StepInfo,
    call: Callable[[], Any],
    *,
    slots: asyncio.Semaphore,
    timeout: float | None,
    traceparent: str | None,
    attributes: dict[str, Any],
    threaded: bool = False,
    hooks: StepHooks | None = None,
    limit: int = MAX_VALUE_BYTES,
) -> Any:
    """Run ``call()`` as attempt ``info``: in a span of the run's trace, with
    :func:`~engine_core.current_step` set (its streams written with ``hooks``), holding
    one of ``slots``, within ``timeout`` seconds; ``threaded``: in a worker thread (see
    :mod:`engine_core.run.threads`).
    Returns the result as it is checkpointed; raises what the attempt raised (a result
    that cannot be checkpointed raises ``NotSerializableError``; one past ``limit``
    characters of JSON, ``ValueTooLargeError``)."""
    if metrics.enabled():
        return await _measured(
            info, call, slots, timeout, traceparent, attributes, threaded, hooks, limit
        )
    if not tracing_configured():
        # No SDK: no span to build (this runs for every attempt).
        token = enter_step(info, hooks)
        try:
            return await _call(call, slots, timeout, info.step, threaded, limit)
        finally:
            leave_step(token)
    with attempt_span(traceparent, info.step, attributes) as span:
        token = enter_step(info, hooks)
        try:
            return await _call(call, slots, timeout, info.step, threaded, limit)
        except Exception as exc:
            record_failure(span, exc)
            raise
        finally:
            leave_step(token)


async def _measured(
    info: StepInfo,
    call: Callable[[], Any],
    slots: asyncio.Semaphore,
    timeout: float | None,
    traceparent: str | None,
    attributes: dict[str, Any],
    threaded: bool,
    hooks: StepHooks | None,
    limit: int,
) -> Any:
    """:func:`run_attempt` with its metrics: the attempt's duration (from when it has a
    step slot) and outcome, one data point each per attempt."""
    kind = "dispatched" if "workflow.function" in attributes else "inline"
    metered = _MeteredSlots(slots)
    outcome = "failed"
    slots = cast(asyncio.Semaphore, metered)
    try:
        if not tracing_configured():  # as in run_attempt: no span to build
            token = enter_step(info, hooks)
            try:
                result = await _call(call, slots, timeout, info.step, threaded, limit)
            finally:
                leave_step(token)
        else:
            with attempt_span(traceparent, info.step, attributes) as span:
                token = enter_step(info, hooks)
                try:
                    result = await _call(call, slots, timeout, info.step, threaded, limit)
                except Exception as exc:
                    record_failure(span, exc)
                    raise
                finally:
                    leave_step(token)
        outcome = "succeeded"
        return result
    finally:
        metrics.attempt_ended(kind, outcome, real_seconds() - metered.began)


class _MeteredSlots:
    """The step slots as one attempt takes one, noting when it got it."""

    def __init__(self, slots: asyncio.Semaphore) -> None:
        self._slots = slots
        self.began = real_seconds()

    async def __aenter__(self) -> None:
        await self._slots.acquire()
        self.began = real_seconds()

    async def __aexit__(self, *exc: object) -> None:
        self._slots.release()


async def _call(
    call: Callable[[], Any],
    slots: asyncio.Semaphore,
    timeout: float | None,
    step: str,
    threaded: bool,
    limit: int,
) -> Any:
    async with slots:
        if threaded:
            running = call_in_thread(call)
            value = await (asyncio.wait_for(running, timeout) if timeout else running)
        else:
            value = call()
        if inspect.isawaitable(value):
            value = await (asyncio.wait_for(value, timeout) if timeout else value)
    return to_stored(value, f"result of step {step!r}", limit)
