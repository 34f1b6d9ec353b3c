"""The store protocol's events and leases."""

from __future__ import annotations

from typing import Protocol

from engine_core.records import (
    EventRecord,
    Lease,
)


class EventStore(Protocol):
    """Events and leases. Part of :class:`~engine_core.store.Store`."""

    # ---- events -----------------------------------------------------------------

    async def insert_event(self, event: EventRecord) -> None:
        """Keep an event for the run until a wait consumes it."""

    async def consume_event(self, run_id: str, name: str, consumer: str) -> EventRecord | None:
        """The event ``consumer`` took already, else the oldest unconsumed event of
        that name, marked consumed by ``consumer`` (atomically; two consumers never
        take one event). None when there is none."""

    # ---- leases -----------------------------------------------------------------

    async def acquire_lease(self, key: str, holder: str, ttl: float) -> Lease | None:
        """Take the lease ``key`` for ``ttl`` seconds if it is free or expired (judged by
        comparing ``expires_at`` with now, never by TTL deletion). Each acquisition
        makes the token one higher than the last one issued for this key. Returns
        None when another holder's lease is still live."""

    async def refresh_lease(self, lease: Lease, ttl: float) -> Lease | None:
        """Extend a lease still held with this token; None when it was lost."""

    async def release_lease(self, lease: Lease) -> None:
        """Give the lease up if still held with this token; otherwise do nothing."""
