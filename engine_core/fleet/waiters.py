"""Waiting for runs to end: a future per waiting call, never a read per waiter per end.

A run that ends in this process wakes its waiters directly. Runs that end elsewhere are
found by one shared query for every awaited run that this process is not driving (and
for the runs it drives once they have been awaited for a second: one stopped from
another process while its step runs here ends its waits at once): at once for new
waiters (batched with every other waiter that arrived meanwhile), then with
a backoff while nothing ends, or sooner when :meth:`RunWaiters.hint` says something may
have ended. While the store does not answer, a waiter is told
:class:`StoreUnavailableError` once the reads have failed for ``store_timeout`` seconds
of its wait, as every other client call is.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from engine_core.common.outages import Outages
from engine_core.common.tasks import wait_event
from engine_core.errors import RunNotFoundError, StoreUnavailableError
from engine_core.records import TERMINAL, RunRecord
from engine_core.store import Store

log = logging.getLogger("engine_core")

POLL_MIN_S = 0.01
POLL_MAX_S = 1.0
#: A run driven here is read with the others once it has been awaited this long.
LOCAL_AFTER_S = 1.0


class RunWaiters:
    """Futures for runs to end, keyed by run id."""

    def __init__(
        self,
        store: Store,
        local: Callable[[str], bool],
        store_timeout: float = 30.0,
        outages: Outages | None = None,
    ) -> None:
        self.store = store
        self.store_timeout = store_timeout
        #: Where an outage the reads meet is logged (once, with the process's others).
        self._outages = outages or Outages()
        # Runs this process is driving: their end here wakes their waiters, so the
        # shared query leaves them out.
        self._local = local
        self._futures: dict[str, list[asyncio.Future[RunRecord]]] = {}
        self._new: set[str] = set()
        self._since: dict[str, float] = {}  # when each awaited run's first waiter came
        self._failing_since: float | None = None  # first of the reads failing in a row
        self._wake = asyncio.Event()
        self._poller: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._futures)

    async def wait(self, run_id: str, timeout: float | None) -> RunRecord:
        """The run once it is terminal; :class:`RunNotFoundError` if it does not exist,
        ``TimeoutError`` past ``timeout`` seconds."""
        future: asyncio.Future[RunRecord] = asyncio.get_running_loop().create_future()
        self._futures.setdefault(run_id, []).append(future)
        self._since.setdefault(run_id, time.monotonic())
        self._new.add(run_id)
        self.hint()
        try:
            async with asyncio.timeout(timeout):
                return await future
        finally:
            waiting = self._futures.get(run_id)
            if waiting is not None:
                if future in waiting:
                    waiting.remove(future)
                if not waiting:
                    del self._futures[run_id]
                    self._since.pop(run_id, None)

    def settled(self, run: RunRecord) -> None:
        """``run`` reached a terminal status in this process."""
        self._since.pop(run.run_id, None)
        for future in self._futures.pop(run.run_id, []):
            if not future.done():
                future.set_result(run)

    def hint(self) -> None:
        """Something may have ended: look now (and make sure someone looks at all)."""
        self._wake.set()
        if self._poller is None or self._poller.done():
            self._poller = asyncio.ensure_future(self._poll())

    def _fail(self, run_id: str, exc: BaseException) -> None:
        self._since.pop(run_id, None)
        for future in self._futures.pop(run_id, []):
            if not future.done():
                future.set_exception(exc)

    async def _poll(self) -> None:
        delay = POLL_MIN_S
        while self._futures:
            self._wake.clear()
            await asyncio.sleep(0)  # let every waiter that arrives with this one register
            new, self._new = self._new & self._futures.keys(), set()
            began = time.monotonic()
            try:
                async with asyncio.timeout(self.store_timeout):
                    ended = await self._outages.watch(self._read(new))
                self._failing_since = None
            except Exception as exc:
                # An outage is logged once by the engine's outage lines, not per poll.
                quiet = isinstance(exc, StoreUnavailableError | TimeoutError)
                if quiet:
                    self._outages.failed(exc)
                level = logging.DEBUG if quiet else logging.WARNING
                log.log(level, "could not read the runs being waited for: %s", exc)
                ended = []
                self._new |= new & self._futures.keys()  # still to be told if they exist
                if self._failing_since is None:
                    self._failing_since = began
                self._give_up(self._failing_since)
            for run in ended:
                self.settled(run)
            if ended or new:
                delay = POLL_MIN_S
            if await wait_event(self._wake, delay):
                continue
            delay = min(delay * 2, POLL_MAX_S)

    async def _read(self, new: set[str]) -> list[RunRecord]:
        """The awaited runs that ended; fails the waiters of ``new`` runs that do not exist.
        A run this process drives is not read: it exists, and its end here wakes its
        waiters (a run started here and awaited costs no read); once the drive lets it
        go (parked, or ended just before its waiter came) it is among the runs polled."""
        new = {r for r in new if not self._local(r)}
        if new:
            found = {r.run_id: r for r in await self.store.get_runs(sorted(new))}
            for run_id in new - found.keys():
                self._fail(run_id, RunNotFoundError(f"no run has id {run_id!r}"))
            ended = [r for r in found.values() if r.status in TERMINAL]
        else:
            ended = []
        old = {r for r in self._futures if r not in new and self._polled(r)}
        if old:
            ended += await self.store.get_runs(sorted(old), status_in=sorted(TERMINAL))
        return ended

    def _polled(self, run_id: str) -> bool:
        """Whether the shared query reads ``run_id``: a run driven elsewhere, or one
        driven here that has been awaited for :data:`LOCAL_AFTER_S` (an operator may
        have stopped it from another process while its step still runs here, and the
        drive learns that only when the step ends)."""
        if not self._local(run_id):
            return True
        since = self._since.get(run_id)
        return since is not None and time.monotonic() - since >= LOCAL_AFTER_S

    def _give_up(self, failing_since: float) -> None:
        """Tell each waiter whose last ``store_timeout`` seconds of waiting saw only
        failed reads that the store is unavailable."""
        now = time.monotonic()
        for run_id, since in list(self._since.items()):
            if now - max(since, failing_since) >= self.store_timeout:
                message = f"the store did not answer within {self.store_timeout:g} s"
                self._fail(run_id, StoreUnavailableError(message))
