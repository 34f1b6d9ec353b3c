"""``VirtualClock``: the engine's time in a test, moved only when the test says so, or
skipped ahead while ``engine.result`` waits on runs that wait only on time (as Temporal's
time-skipping test server does). See docs/guides/testing.md.

``Engine(InMemoryStore(), clock=VirtualClock())`` hands the clock down to every mechanism
of the engine and to the store (``engine_core.common.clock``): sleeps, event timeouts,
retry delays, delayed starts, deadlines, schedules, leases, claims and every recorded
timestamp read it, and every timer the engine arms is an alarm on it. The clock moves
only in :meth:`VirtualClock.advance`, or by itself inside ``engine.result`` (with
``auto_advance``), and each time only to the next alarm, once the engines on it have
settled: no pass, job, background task or turn of one of their loops in progress.
Real seconds stay real: a caller's ``timeout=``, a store's timeout, a poll's backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta

from engine_core.common.clock import Settling, Timer, utcnow
from engine_core.common.durations import Duration, parse_duration
from engine_core.common.tasks import cancel_and_wait

#: Turns of the event loop the engines must stay idle through to count as settled.
QUIET_TURNS = 3
#: After this many turns with an engine busy, settling naps between looks (a step may do
#: real work, in a thread or on a socket): :data:`NAP_S` real seconds.
BUSY_TURNS = 20
NAP_S = 0.001
#: How often a clock skipping ahead looks again while a run waits on something other
#: than time (an event with no timeout, a worker elsewhere), in real seconds.
BLOCKED_POLL_S = 0.005


class _Alarm:
    """A callback armed on a virtual clock (a :class:`~engine_core.common.clock.Timer`)."""

    __slots__ = ("callback", "cancelled", "handle")

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.cancelled = False
        self.handle: asyncio.Handle | None = None

    def cancel(self) -> None:
        """Do not call it."""
        self.cancelled = True
        if self.handle is not None:
            self.handle.cancel()

    def ring(self) -> None:
        """Call it soon, on the event loop, as a real timer would."""
        if not self.cancelled:
            self.handle = asyncio.get_running_loop().call_soon(self.callback)


class VirtualClock:
    """Time for tests: ``Engine(InMemoryStore(), clock=VirtualClock())``.

    ``start``: the time it shows first, a timezone-aware datetime (default: the real time
    now); a naive one raises ``ValueError``, since it could mean any zone. With
    ``auto_advance`` (the default), whenever every run the engines on it drive waits only
    on time while a caller awaits ``engine.result``, it jumps to the earliest time
    anything is due. A MongoStore refuses it (``ValueError``): the hosts of a fleet judge
    its leases against their real clocks.
    """

    virtual = True

    def __init__(self, start: datetime | None = None, *, auto_advance: bool = True) -> None:
        if start is None:
            start = utcnow()
        elif not isinstance(start, datetime):
            raise TypeError(f"VirtualClock(start=...) takes a datetime, not {start!r}")
        elif start.tzinfo is None or start.utcoffset() is None:
            raise ValueError(
                f"VirtualClock(start=...) needs a timezone-aware datetime, such as "
                f"datetime(2026, 1, 1, tzinfo=UTC), not the naive {start!r}: a naive one "
                "could mean any time zone"
            )
        self._now = start.astimezone(UTC)
        self.auto_advance = bool(auto_advance)
        self._alarms: list[tuple[datetime, int, _Alarm]] = []
        self._order = itertools.count()
        self._engines: list[Settling] = []
        self._moving = asyncio.Lock()
        self._waiting = 0
        self._skipper: asyncio.Future[None] | None = None

    def __repr__(self) -> str:
        return f"VirtualClock({self._now.isoformat()})"

    def now(self) -> datetime:
        """The virtual time now, timezone-aware (UTC)."""
        return self._now

    def call_at(self, when: datetime, callback: Callable[[], None]) -> Timer:
        """Call ``callback()`` when the clock reaches ``when`` (soon, on the event loop,
        when it has already)."""
        alarm = _Alarm(callback)
        if when <= self._now:
            alarm.ring()
        else:
            heapq.heappush(self._alarms, (when, next(self._order), alarm))
        return alarm

    def next_due(self) -> datetime | None:
        """The earliest time an alarm is armed for, or None."""
        while self._alarms and self._alarms[0][2].cancelled:
            heapq.heappop(self._alarms)
        return self._alarms[0][0] if self._alarms else None

    # ---- moving ------------------------------------------------------------------

    async def advance(self, duration: Duration | timedelta) -> None:
        """Move the clock ``duration`` ahead (a duration string such as ``"2d"``, seconds,
        or a ``timedelta``): to each time something is due in turn, letting the engines
        settle at each, then to the target; returns once they are idle there. A negative
        or malformed duration raises :class:`~engine_core.InvalidDurationError`."""
        if isinstance(duration, timedelta):
            duration = duration.total_seconds()
        target = self._now + timedelta(seconds=parse_duration(duration, what="advance"))
        async with self._moving:
            await self._settle()
            while (due := self.next_due()) is not None and due <= target:
                self._move_to(due)
                await self._settle()
            self._move_to(target)
            await self._settle()

    def _move_to(self, when: datetime) -> None:
        """Show ``when`` (never go back), and ring every alarm due by then, in order."""
        self._now = max(self._now, when)
        while self._alarms and self._alarms[0][0] <= self._now:
            heapq.heappop(self._alarms)[2].ring()
        for engine in list(self._engines):
            engine.time_moved()

    async def _settle(self) -> None:
        """Until no engine on the clock has been busy for :data:`QUIET_TURNS` turns."""
        quiet = turns = 0
        while quiet < QUIET_TURNS:
            turns += 1
            await asyncio.sleep(0 if turns <= BUSY_TURNS else NAP_S)
            if any(engine.busy() for engine in self._engines):
                quiet = 0
            else:
                quiet += 1

    async def _waits_only_on_time(self) -> bool:
        for engine in list(self._engines):
            if not await engine.waits_only_on_time():
                return False
        return True

    async def _skip(self) -> None:
        """While callers await results: jump to the next alarm whenever the engines are
        idle and their runs wait only on time; else look again a little later."""
        while True:
            async with self._moving:
                await self._settle()
                due = self.next_due()
                if due is not None and await self._waits_only_on_time():
                    self._move_to(due)
                    continue
            await asyncio.sleep(BLOCKED_POLL_S)

    # ---- what the engines tell it --------------------------------------------------

    def attach(self, engine: Settling) -> None:
        """``engine`` drives runs on this clock (it serves)."""
        if engine not in self._engines:
            self._engines.append(engine)

    def detach(self, engine: Settling) -> None:
        """``engine`` stopped serving."""
        if engine in self._engines:
            self._engines.remove(engine)

    @contextlib.asynccontextmanager
    async def waiting(self) -> AsyncIterator[None]:
        """Entered by ``engine.result`` while it waits: with ``auto_advance``, the clock
        skips ahead meanwhile."""
        if not self.auto_advance:
            yield
            return
        self._waiting += 1
        if self._skipper is None or self._skipper.done():
            self._skipper = asyncio.ensure_future(self._skip())
        try:
            yield
        finally:
            self._waiting -= 1
            if not self._waiting and self._skipper is not None:
                skipper, self._skipper = self._skipper, None
                await cancel_and_wait(skipper)
