"""Retrying transient MongoDB errors (a failover, a dropped connection).

Bounded exponential backoff with jitter; every retry is logged. Only operations whose
repetition is safe are wrapped (see ``MongoStore``): reads, and writes that are guarded
or idempotent. The driver's own retryable writes already repeat a single write once,
exactly once, on a replica set; this layer covers failovers that outlast that. Anything
that is not transient (a duplicate key, a bad query, a closed client) surfaces at once.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from pymongo.errors import ConnectionFailure, PyMongoError
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
    wait_random,
)

log = logging.getLogger("pikku_mongo.retry")

P = ParamSpec("P")
R = TypeVar("R")

#: At most this many attempts of one operation ...
MAX_ATTEMPTS = 5
#: ... and no new attempt once this many seconds have passed since the first.
MAX_SECONDS = 10.0
#: Waits: 0.1 s, 0.2 s, 0.4 s, 0.8 s (each plus up to 0.1 s of jitter), capped at 2 s.
_WAIT = wait_exponential(multiplier=0.1, max=2.0) + wait_random(0, 0.1)


def is_transient(exc: BaseException) -> bool:
    """A network error, a failover (``AutoReconnect``, ``NotPrimaryError``,
    ``NetworkTimeout`` and every other ``ConnectionFailure``), or an error the server
    labelled as safe to retry."""
    if isinstance(exc, ConnectionFailure):
        return True
    return isinstance(exc, PyMongoError) and exc.has_error_label("RetryableWriteError")


def _log_retry(state: RetryCallState) -> None:
    outcome = state.outcome
    exc = outcome.exception() if outcome is not None else None
    wait = state.next_action.sleep if state.next_action is not None else 0.0
    name = getattr(state.fn, "__qualname__", "MongoDB operation")
    log.warning(
        "%s: transient %s (attempt %d of %d): %s; retrying in %.2fs",
        name,
        type(exc).__name__,
        state.attempt_number,
        MAX_ATTEMPTS,
        exc,
        wait,
    )


def retrying() -> AsyncRetrying:
    """A fresh retry controller with the policy above."""
    return AsyncRetrying(
        retry=retry_if_exception(is_transient),
        stop=stop_after_attempt(MAX_ATTEMPTS) | stop_after_delay(MAX_SECONDS),
        wait=_WAIT,
        before_sleep=_log_retry,
        reraise=True,
    )


def transient_retry(
    fn: Callable[P, Coroutine[Any, Any, R]],
) -> Callable[P, Coroutine[Any, Any, R]]:
    """Decorate an async operation that is safe to repeat: retry it on transient errors."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        result: R = await retrying()(fn, *args, **kwargs)
        return result

    return wrapper
