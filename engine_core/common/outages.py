"""Riding out a store outage: wait with a bounded backoff, log once per outage.

A store that is away is not a workflow's failure: passes, workers and recovery wait
for it and carry on where they stopped. One line is logged when an outage starts
(WARNING) and one when it ends (INFO), however many calls failed in between, each
with the error's one-line summary. A server that is killed or frozen may raise nothing
for a while (the driver waits for it inside the call): a call that watches for that
(:meth:`Outages.watch`: a worker's registry refresh every few seconds, a client's
calls) marks the outage begun once it has had no answer for :data:`SLOW_S` seconds, so
every process that waits an outage out logs it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from engine_core.common.lifecycle_log import fields, one_line
from engine_core.errors import StoreUnavailableError

log = logging.getLogger("engine_core.outage")

_T = TypeVar("_T")

#: Waits between tries: from the first to the last, doubling.
FIRST_WAIT_S = 0.1
LAST_WAIT_S = 5.0
#: A small command (a worker's registry refresh, a client's call) with no answer for
#: this long means the store is away, though the driver raises nothing yet.
SLOW_S = 5.0


class StoreDown(BaseException):
    """A pass met a store outage: it ends without writing more, and is given again once
    the store is back. (A ``BaseException``: a workflow body's ``except Exception`` must
    not take it for its own failure.)"""


class Outages:
    """Tracks whether the store is away, for one process; see :meth:`wait`."""

    def __init__(self) -> None:
        self._since: float | None = None
        self._failures = 0
        self._back_at: float | None = None
        self._first_error = ""

    @property
    def down(self) -> bool:
        """Whether the store is down now (a call failed and none has succeeded since)."""
        return self._since is not None

    def quiet_for(self) -> float:
        """Seconds since the last outage this process saw ended (0 during one, infinity
        when it saw none)."""
        if self._since is not None:
            return 0.0
        if self._back_at is None:
            return float("inf")
        return time.monotonic() - self._back_at

    def failed(self, exc: BaseException) -> None:
        """A call failed with ``exc`` because the store is unreachable: the outage begins
        (logged once)."""
        self._failures += 1
        if self._since is None:
            self._since = time.monotonic()
            self._first_error = one_line(exc)
            log.warning(
                "the store is unavailable (%s); waiting for it",
                self._first_error,
                extra=fields(None),
            )

    def unanswered(self, began: float) -> None:
        """A store call made at ``began`` (monotonic) has had no answer for
        :data:`SLOW_S` seconds: an outage (a server killed or frozen) that the driver
        waits out inside the call, raising nothing yet; logged as one begins."""
        if self._since is None:
            self._since = began
            self._first_error = f"no answer for {time.monotonic() - began:.0f} s"
            log.warning(
                "the store has not answered for %.0f s; waiting for it",
                time.monotonic() - began,
                extra=fields(None),
            )

    async def watch(self, call: Awaitable[_T]) -> _T:
        """``await call``; if it has not answered within :data:`SLOW_S` seconds, an
        outage begins (:meth:`unanswered`), and ends when it answers."""
        began = time.monotonic()
        timer = asyncio.get_running_loop().call_later(SLOW_S, self.unanswered, began)
        try:
            result = await call
        finally:
            timer.cancel()
        self.back()
        return result

    def back(self) -> None:
        """A call succeeded: an outage in progress ends (logged, with how long it lasted)."""
        if self._since is not None:
            log.info(
                "the store is back after %.1f s (%d calls failed meanwhile; first: %s)",
                time.monotonic() - self._since,
                self._failures,
                self._first_error,
                extra=fields(None),
            )
            self._since = None
            self._failures = 0
            self._back_at = time.monotonic()

    async def call(
        self,
        fn: Callable[[], Awaitable[_T]],
        *,
        timeout: float | None = None,
        watched: bool = False,
    ) -> _T:
        """``await fn()``, again and again while the store is unavailable, waiting more
        between tries; past ``timeout`` seconds of outage, the last
        :class:`StoreUnavailableError`. ``watched``: each try is :meth:`watch`-ed."""
        began = time.monotonic()
        wait = FIRST_WAIT_S
        while True:
            try:
                if timeout is None:
                    result = await (self.watch(fn()) if watched else fn())
                else:
                    left = max(0.001, timeout - (time.monotonic() - began))
                    try:
                        async with asyncio.timeout(left):
                            result = await (self.watch(fn()) if watched else fn())
                    except TimeoutError:
                        raise StoreUnavailableError(
                            f"the store did not answer within {timeout:g} s"
                        ) from None
            except StoreUnavailableError as exc:
                self.failed(exc)
                if timeout is not None and time.monotonic() - began + wait > timeout:
                    raise
                await asyncio.sleep(wait)
                wait = min(wait * 2, LAST_WAIT_S)
                continue
            self.back()
            return result
