"""Keeping what a holder holds alive: a run's lease, the recovery lease, a job's claim.

Every holder renews the same way: ``async with`` a keep-alive, which renews every third
of the time to live until the block ends, and notes when a renewal fails (the hold was
lost: a newer holder took over, and this holder's writes are fenced out).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import Any

import engine_core.common.lifecycle_log as lifecycle_log
from engine_core.common.tasks import cancel_and_wait
from engine_core.errors import StoreUnavailableError
from engine_core.records import Lease
from engine_core.store import Store

log = logging.getLogger("engine_core")


class KeepAlive:
    """Calls ``renew()`` every ``ttl / 3`` seconds while the block runs; stops at the first
    renewal that returns False and logs ``what`` was lost."""

    def __init__(
        self,
        renew: Callable[[], Awaitable[bool]],
        ttl: float,
        what: str,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self._renew = renew
        self._extra = extra
        self._interval = ttl / 3
        self._what = what
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        #: Set once a renewal failed.
        self.lost = False

    async def _loop(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self._interval)
            if self._stopping:
                return
            try:
                renewed = await self._renew()
            except Exception as exc:
                # The store may be back before the hold lapses: keep trying.
                log.log(
                    logging.DEBUG if isinstance(exc, StoreUnavailableError) else logging.WARNING,
                    "could not renew %s: %s",
                    self._what,
                    lifecycle_log.one_line(exc),
                    extra=self._extra or lifecycle_log.fields(None),
                )
                continue
            if not renewed:
                self.lost = True
                lifecycle_log.lost(self._what, self._extra)
                return

    async def __aenter__(self) -> KeepAlive:
        self._task = asyncio.ensure_future(self._loop())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stopping = True
        await cancel_and_wait(self._task)


class HeldLease:
    """A lease being held: :attr:`lease` is the latest renewal."""

    def __init__(self, store: Store, lease: Lease, ttl: float) -> None:
        self.store = store
        self.lease = lease
        self.ttl = ttl

    async def renew(self) -> bool:
        """Extend the lease; whether it is still held."""
        renewed = await self.store.refresh_lease(self.lease, self.ttl)
        if renewed is None:
            return False
        self.lease = renewed
        return True


@contextlib.asynccontextmanager
async def holding(
    store: Store, key: str, holder: str, ttl: float
) -> AsyncIterator[HeldLease | None]:
    """Take the lease ``key`` and keep it alive for the block, then release it; yields
    None (and holds nothing) when another holder's lease is live."""
    lease = await store.acquire_lease(key, holder, ttl)
    if lease is None:
        yield None
        return
    held = HeldLease(store, lease, ttl)
    try:
        async with KeepAlive(held.renew, ttl, f"the lease {key!r}"):
            yield held
    finally:
        await store.release_lease(held.lease)
