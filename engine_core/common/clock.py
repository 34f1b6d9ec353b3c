"""The engine's time: one clock, handed down from ``Engine(store, clock=...)``.

engine_core reads time here and nowhere else (``tests/test_clock.py`` pins it), in two
kinds:

- **The engine's time**, a :class:`Clock`: when things happen and when they fall due.
  Run and step timestamps, sleeps, event timeouts, retry delays, delayed starts,
  deadlines, schedules, leases and claims. Every mechanism reads it from the clock it
  was handed (``runtime.clock``; the in-memory store keeps the one its engine gave it,
  :meth:`~engine_core.store.Store.follow_clock`), so a test can move it: the real clock
  (:data:`REAL_CLOCK`) by default, ``engine_core.testing.VirtualClock`` in tests.
- **Real seconds**, :func:`real_seconds`: how long real work took or may take. A store
  call's timeout, an outage, a poll's backoff, the grace of a shutdown, a step's
  duration in the metrics. These never follow a virtual clock: the work is as slow as
  it is, and a caller's ``timeout=`` is in real seconds.

A clock that moves by itself (``VirtualClock``) has to know when the engines driving runs
on it have settled, and what their runs wait on: an engine attaches itself while it
serves (:class:`Settling`), and ``engine.result`` waits inside :meth:`Clock.waiting`.
The real clock ignores both.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Protocol

#: Real seconds from an arbitrary start (monotonic): for bounding and measuring real
#: work, never for the engine's time.
real_seconds: Callable[[], float] = time.perf_counter


def utcnow() -> datetime:
    """The real time now, timezone-aware (UTC): the real clock's reading, for code that
    has no engine's clock to read (MongoStore, which always runs on real time; tools)."""
    return datetime.now(UTC)


class Timer(Protocol):
    """A callback armed on a clock."""

    def cancel(self) -> None:
        """Do not call it (nothing when it was called already)."""


class Settling(Protocol):
    """What a clock that moves by itself asks of an engine that drives runs on it."""

    def busy(self) -> bool:
        """Whether the engine is working now (a pass, a job, a background task, a turn of
        one of its loops), so time must not move yet."""

    async def waits_only_on_time(self) -> bool:
        """Whether every run the engine drives waits only on time (a sleep, a retry
        delay, a delayed start, a schedule, a wait's timeout, or a child run)."""

    def time_moved(self) -> None:
        """The clock jumped: refresh what the engine keeps alive by time (its record in
        the registry of workers)."""


class Clock(Protocol):
    """Where engine_core reads the engine's time (see the module docstring)."""

    #: Whether time moves only when told (a virtual clock): then nothing may wait on it
    #: in memory (a short retry delay parks its run instead), because a waiting pass
    #: would keep the engine busy and the clock still.
    virtual: bool

    def now(self) -> datetime:
        """The time now, timezone-aware (UTC)."""

    def call_at(self, when: datetime, callback: Callable[[], None]) -> Timer:
        """Call ``callback()`` once ``when`` has come (soon when it has already)."""

    def attach(self, engine: Settling) -> None:
        """``engine`` drives runs on this clock from now on (it serves)."""

    def detach(self, engine: Settling) -> None:
        """``engine`` stopped serving."""

    def waiting(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Entered while a caller awaits a run's end (``engine.result``): a clock that
        moves by itself may skip ahead then."""


class RealClock:
    """The wall clock: ``datetime.now(UTC)``, and timers on the event loop."""

    virtual = False

    def __init__(self) -> None:
        # A partial, not a method: read at every step boundary, it costs no frame.
        self.now: Callable[[], datetime] = functools.partial(datetime.now, UTC)

    def call_at(self, when: datetime, callback: Callable[[], None]) -> Timer:
        """A loop timer for what remains until ``when``."""
        delay = max(0.0, (when - self.now()).total_seconds())
        return asyncio.get_running_loop().call_later(delay, callback)

    def attach(self, engine: Settling) -> None:
        """Nothing: the real clock moves by itself."""

    def detach(self, engine: Settling) -> None:
        """Nothing."""

    def waiting(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Nothing to do while a caller waits."""
        return _nothing()

    def __repr__(self) -> str:
        return "RealClock()"


@contextlib.asynccontextmanager
async def _nothing() -> AsyncIterator[None]:
    yield


#: The real clock every engine and in-memory store reads unless given another.
REAL_CLOCK = RealClock()
