"""Retrying transient MongoDB errors (a failover, a dropped connection).

Bounded exponential backoff with jitter; every retry is logged at DEBUG. Only operations whose
repetition is safe are wrapped (see ``MongoStore``): reads, and writes that are guarded
or idempotent. The driver's own retryable writes already repeat a single write once,
exactly once, on a replica set; this layer covers failovers that outlast that. Anything
that is not transient (a duplicate key, a bad query, a closed client) surfaces at once; a
document over the BSON size limit surfaces at once as :class:`DocumentTooLargeError`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from pymongo.errors import (
    BulkWriteError,
    ConnectionFailure,
    DocumentTooLarge,
    OperationFailure,
    PyMongoError,
)
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
    wait_random,
)

from engine_core.errors import StoreUnavailableError
from pikku_mongo.errors import DocumentTooLargeError
from pikku_mongo.wire.server import short_reason

log = logging.getLogger("pikku_mongo.wire.retry")

P = ParamSpec("P")
R = TypeVar("R")

#: At most this many attempts of one operation ...
MAX_ATTEMPTS = 5
#: ... and no new attempt once this many seconds have passed since the first.
MAX_SECONDS = 5.0
#: Waits: 0.1 s, 0.2 s, 0.4 s, 0.8 s (each plus up to 0.1 s of jitter), capped at 2 s.
_WAIT = wait_exponential(multiplier=0.1, max=2.0) + wait_random(0, 0.1)


def is_transient(exc: BaseException) -> bool:
    """A network error, a failover (``AutoReconnect``, ``NotPrimaryError``,
    ``NetworkTimeout`` and every other ``ConnectionFailure``), or an error the server
    labelled as safe to retry."""
    if isinstance(exc, ConnectionFailure):
        return True
    return isinstance(exc, PyMongoError) and exc.has_error_label("RetryableWriteError")


#: Server error codes for a document over the BSON size limit: BSONObjectTooLarge (an
#: insert; an update on recent servers) and the update and upsert checks of older ones.
TOO_LARGE_CODES = frozenset({10334, 17419, 17420})


def too_large(exc: BaseException) -> str | None:
    """Why ``exc`` is a refusal of an oversized document (the driver's check before
    sending, or the server's), or None when it is something else."""
    if isinstance(exc, DocumentTooLarge):
        return str(exc)
    if isinstance(exc, BulkWriteError):
        for error in exc.details.get("writeErrors") or []:
            if error.get("code") in TOO_LARGE_CODES:
                return str(error.get("errmsg") or exc)
        return None
    if isinstance(exc, OperationFailure) and exc.code in TOO_LARGE_CODES:
        return str((exc.details or {}).get("errmsg") or exc)
    return None


def _refuse_oversize(fn: object, exc: BaseException) -> None:
    """Raise :class:`DocumentTooLargeError` in place of a size refusal."""
    detail = too_large(exc)
    if detail is not None:
        name = getattr(fn, "__qualname__", "MongoDB write")
        raise DocumentTooLargeError(name, detail) from exc


def surface_oversize(
    fn: Callable[P, Coroutine[Any, Any, R]],
) -> Callable[P, Coroutine[Any, Any, R]]:
    """Decorate an operation that retries by itself: a size refusal surfaces as
    :class:`DocumentTooLargeError`."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except Exception as exc:
            _refuse_oversize(fn, exc)
            raise

    return wrapper


#: The wait after a first attempt failed (tenacity's own waits follow the later ones).
FIRST_WAIT_S = 0.1


def unavailable(exc: BaseException) -> StoreUnavailableError:
    """The engine's error for a transient failure this layer gave up retrying: the
    engine waits the outage out (see ``engine_core.common.outages``)."""
    return StoreUnavailableError(
        f"the MongoDB server is unavailable: {type(exc).__name__}: {short_reason(exc)}"
    )


def _warn(fn: object, exc: BaseException | None, attempt: int, wait: float) -> None:
    # DEBUG: a retry that works is no news, and one that does not becomes an outage,
    # which the engine logs once when it starts and once when it ends.
    log.debug(
        "%s: transient %s (attempt %d of %d): %s; retrying in %.2fs",
        getattr(fn, "__qualname__", "MongoDB operation"),
        type(exc).__name__,
        attempt,
        MAX_ATTEMPTS,
        short_reason(exc) if exc is not None else "",
        wait,
    )


def _log_retry(state: RetryCallState) -> None:
    outcome = state.outcome
    exc = outcome.exception() if outcome is not None else None
    wait = state.next_action.sleep if state.next_action is not None else 0.0
    # The first attempt ran outside tenacity (see transient_retry).
    _warn(state.fn, exc, state.attempt_number + 1, wait)


def retrying(attempts: int = MAX_ATTEMPTS) -> AsyncRetrying:
    """A fresh retry controller with the policy above, for ``attempts`` attempts."""
    return AsyncRetrying(
        retry=retry_if_exception(is_transient),
        stop=stop_after_attempt(attempts) | stop_after_delay(MAX_SECONDS),
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
        # The first attempt goes straight to the driver: building a retry controller
        # for every command cost about a tenth of an inline step.
        try:
            return await fn(*args, **kwargs)
        except Exception as exc:
            if not is_transient(exc):
                _refuse_oversize(fn, exc)
                raise
            _warn(fn, exc, 1, FIRST_WAIT_S)
        await asyncio.sleep(FIRST_WAIT_S)
        try:
            result: R = await retrying(MAX_ATTEMPTS - 1)(fn, *args, **kwargs)
        except Exception as exc:
            if is_transient(exc):
                raise unavailable(exc) from exc
            _refuse_oversize(fn, exc)
            raise
        return result

    return wrapper
