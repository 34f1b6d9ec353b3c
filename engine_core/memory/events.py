"""The in-memory store's events and leases."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from engine_core.memory.cloning import clone
from engine_core.records import EventRecord, Lease
from engine_core.store import TimeSource


class EventLeaseMemory:
    """The event and lease methods of :class:`~engine_core.memory.store.InMemoryStore`."""

    #: The clock its engine reads (see ``InMemoryStore.follow_clock``).
    clock: TimeSource
    _events: list[EventRecord]
    _leases: dict[str, Lease]

    # ---- events -----------------------------------------------------------------

    async def insert_event(self, event: EventRecord) -> None:
        """:meth:`Store.insert_event <engine_core.store.Store.insert_event>`, in memory."""
        self._events.append(clone(event))

    async def consume_event(self, run_id: str, name: str, consumer: str) -> EventRecord | None:
        """:meth:`Store.consume_event <engine_core.store.Store.consume_event>`, in memory."""
        mine = [e for e in self._events if e.run_id == run_id and e.consumed_by == consumer]
        if mine:
            return clone(mine[0])
        for event in self._events:  # kept in arrival order
            if event.run_id == run_id and event.name == name and event.consumed_by is None:
                event.consumed_by = consumer
                return clone(event)
        return None

    # ---- leases -----------------------------------------------------------------

    async def acquire_lease(self, key: str, holder: str, ttl: float) -> Lease | None:
        """:meth:`Store.acquire_lease <engine_core.store.Store.acquire_lease>`, in memory."""
        now = self.clock.now()
        current = self._leases.get(key)
        if current is not None and current.expires_at > now:
            return None
        lease = Lease(
            key=key,
            holder=holder,
            token=(current.token if current is not None else 0) + 1,
            expires_at=now + timedelta(seconds=ttl),
        )
        self._leases[key] = lease
        return lease

    async def refresh_lease(self, lease: Lease, ttl: float) -> Lease | None:
        """:meth:`Store.refresh_lease <engine_core.store.Store.refresh_lease>`, in memory."""
        now = self.clock.now()
        current = self._leases.get(lease.key)
        if (
            current is None
            or current.token != lease.token
            or current.holder != lease.holder
            or current.expires_at <= now
        ):
            return None
        renewed = replace(current, expires_at=now + timedelta(seconds=ttl))
        self._leases[lease.key] = renewed
        return renewed

    async def release_lease(self, lease: Lease) -> None:
        """:meth:`Store.release_lease <engine_core.store.Store.release_lease>`, in memory."""
        current = self._leases.get(lease.key)
        if current is not None and current.token == lease.token and current.holder == lease.holder:
            self._leases[lease.key] = replace(
                current, expires_at=datetime.min.replace(tzinfo=current.expires_at.tzinfo)
            )
