"""Conformance cases for the registry of serving engines."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from engine_core.common.clock import utcnow
from engine_core.records import Worker
from engine_core.store import Store


def make_worker(instance_id: str = "w1", **changes: Any) -> Worker:
    """A worker record ``instance_id`` (``changes``: its fields that differ)."""
    now = utcnow().replace(microsecond=123456)
    fields: dict[str, Any] = {
        "instance_id": instance_id,
        "host": "box-1",
        "pid": 4242,
        "versions": [],
        "workflows": ["order", "a.b$c"],
        "step_functions": ["send-email"],
        "queues": {"line.$1": {"concurrency": 2, "rate": "5/60s"}},
        "started_at": now - timedelta(minutes=5),
        "last_seen": now,
        "expires_at": now + timedelta(seconds=20),
        "concurrency": 16,
        "slots_used": 3,
        "clock_offset": 0.25,
    }
    fields.update(changes)
    return Worker(**fields)


class WorkerCases:
    """What a store must do with the workers' records."""

    async def test_workers_round_trip_refresh_and_delete(self, store: Store) -> None:
        """Workers round trip refresh and delete."""
        assert await store.list_workers() == []
        first = make_worker()
        await store.put_worker(first)
        assert await store.list_workers() == [first]
        later = make_worker(slots_used=5, workflows=["order"])
        await store.put_worker(later)  # a refresh replaces the record
        assert await store.list_workers() == [later]
        await store.delete_worker("w1")
        await store.delete_worker("w1")  # nothing left: no error
        assert await store.list_workers() == []

    async def test_expired_workers_are_not_listed_and_order_is_by_start(self, store: Store) -> None:
        """Expired workers are not listed and order is by start."""
        now = utcnow()
        old = make_worker("b", started_at=datetime(2026, 1, 1, tzinfo=UTC))
        young = make_worker("a")
        dead = make_worker("c", expires_at=now - timedelta(seconds=1))
        for worker in (young, dead, old):
            await store.put_worker(worker)
        assert [w.instance_id for w in await store.list_workers()] == ["b", "a"]
