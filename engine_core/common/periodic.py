"""``Periodic``: run something now and then in the background, waiting out store outages,
until told to stop, and then stop for certain.

Admission, the delay and deadline sweep, the scheduler and recovery are each such a
loop. A loop stopped only by cancelling its task can go on for ever: on Python 3.11 a
cancellation can be lost inside a library (``asyncio.wait_for`` returning a result that
raced the cancellation; ``asyncio.timeout`` turning a cancellation that arrives as its
deadline expires into ``TimeoutError``, which a loop's ``except Exception`` then takes
for an ordinary failure). So :meth:`Periodic.stop` raises a flag that the loop checks
at every turn, wakes it, and cancels it again for as long as it runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from engine_core.common.clock import Clock, Timer
from engine_core.common.outages import Outages
from engine_core.common.tasks import cancel_and_wait, wait_event

log = logging.getLogger("engine_core")

#: ``await body()``: one turn of the loop; the seconds until the next turn, or None for
#: the loop's usual interval.
Body = Callable[[], Awaitable[float | None]]


class Periodic:
    """Runs ``body`` in a background task: every ``every`` seconds, after the seconds a
    turn returns, or sooner when :meth:`wake` is called.

    A store outage met by a turn is waited out (:meth:`Outages.call`: one log line when
    it starts and one when it ends); any other error is logged and the turn is tried
    again after ``every`` seconds. ``wait_first`` waits before the first turn;
    ``settle`` is how long a woken loop waits for more wake-ups before its turn (so
    many pokes share one turn). The seconds are real ones: a turn that waits for a time
    on the engine's ``clock`` asks for a wake-up then (:meth:`wake_at`).
    """

    def __init__(
        self,
        what: str,
        body: Body,
        *,
        every: float,
        outages: Outages,
        wait_first: bool = False,
        settle: float = 0.0,
        clock: Clock | None = None,
    ) -> None:
        self.what = what
        self._body = body
        self._every = every
        self._outages = outages
        self._wait_first = wait_first
        self._settle = settle
        self._wake = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._clock = clock
        self._alarm: tuple[datetime, Timer] | None = None
        self._turning = False

    @property
    def running(self) -> bool:
        """Whether the loop runs (started and not ended)."""
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start the loop in the background."""
        self._stopping = False
        self._task = asyncio.ensure_future(self._loop())

    def wake(self) -> None:
        """Take the next turn now (or, when one is running, right after it)."""
        self._wake.set()

    def wake_at(self, when: datetime) -> None:
        """Take a turn when the clock (given at construction) reaches ``when`` (the one
        time asked for last)."""
        assert self._clock is not None, "a loop woken at a time needs the engine's clock"
        if self._alarm is not None:
            if self._alarm[0] == when:
                return
            self._alarm[1].cancel()
        self._alarm = (when, self._clock.call_at(when, self.wake))

    @property
    def busy(self) -> bool:
        """Whether a turn is running or about to (woken)."""
        return self._turning or self._wake.is_set()

    async def stop(self) -> None:
        """Stop the loop and wait until it has stopped. A turn in progress is cancelled."""
        self._stopping = True
        self._wake.set()
        if self._alarm is not None:
            self._alarm[1].cancel()
            self._alarm = None
        await cancel_and_wait(self._task)
        self._task = None

    async def _loop(self) -> None:
        delay = self._every if self._wait_first else 0.0
        while not self._stopping:
            if delay > 0 or self._wake.is_set():
                woken = await wait_event(self._wake, delay)
                if self._stopping:
                    return
                if woken and self._settle > 0:
                    await asyncio.sleep(self._settle)
            else:
                await asyncio.sleep(0)  # a turn that never awaits must not starve the loop
            self._wake.clear()
            self._turning = True
            try:
                wanted = await self._outages.call(self._body)
            except asyncio.CancelledError:
                raise
            except Exception:
                if self._stopping:
                    return  # a cancellation taken for an error on the way out
                log.exception("%s failed; trying again", self.what)
                wanted = None
            finally:
                self._turning = False
            delay = self._every if wanted is None else max(0.0, wanted)
