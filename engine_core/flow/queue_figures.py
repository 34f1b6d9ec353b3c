"""What ``engine.list_queues`` shows: each queue's limits, depth and admissions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine_core.common.status import QueueStatus
from engine_core.flow.queues import QueueLimits, parse_rate
from engine_core.records import utcnow
from engine_core.store import Store


def limits_doc(limits: QueueLimits) -> dict[str, Any]:
    """A queue's declared limits as the store keeps them."""
    rate = limits.rate
    return {
        "concurrency": limits.concurrency,
        "worker_concurrency": limits.worker_concurrency,
        "key_concurrency": limits.key_concurrency,
        "rate": None if rate is None else f"{rate.count}/{rate.per:g}s",
    }


def limits_of(name: str, doc: dict[str, Any]) -> QueueLimits:
    """A queue's limits as the store (or a worker's record) keeps them."""
    rate = doc.get("rate")
    return QueueLimits(
        name,
        concurrency=doc.get("concurrency"),
        worker_concurrency=doc.get("worker_concurrency"),
        key_concurrency=doc.get("key_concurrency"),
        rate=parse_rate(rate) if isinstance(rate, str) else None,
    )


async def store_declared_limits(store: Store, declared: Mapping[str, QueueLimits]) -> None:
    """Store the limits of the queues declared here where the store holds others (or
    none), so that any process shows them."""
    if not declared:
        return
    stored = await store.list_queue_limits()
    for name, limits in declared.items():
        doc = limits_doc(limits)
        if stored.get(name) != doc:
            await store.put_queue_limits(name, doc)


async def queue_figures(store: Store, declared: Mapping[str, QueueLimits]) -> list[QueueStatus]:
    """The queues declared here, declared by any serving process (their limits are
    stored) or holding runs in the store, sorted by name. This process's declaration
    wins; a queue declared nowhere shows no limits."""
    out = []
    stored = await store.list_queue_limits()
    names = sorted(set(declared) | set(stored) | set(await store.queue_names()))
    for name in names:
        limits = declared.get(name) or limits_of(name, stored.get(name, {}))
        counts = await store.count_queue(name)
        state = await store.get_queue_state(name)
        minute = int(utcnow().timestamp() // 60)
        recent = state.minutes if state is not None else []
        rate = limits.rate
        out.append(
            QueueStatus(
                name=name,
                concurrency=limits.concurrency,
                worker_concurrency=limits.worker_concurrency,
                key_concurrency=limits.key_concurrency,
                rate=None if rate is None else f"{rate.count}/{rate.per:g}s",
                queued=counts.get("queued", 0),
                active=sum(n for s, n in counts.items() if s != "queued"),
                admitted_last_minute=sum(n for m, n in recent if m == minute - 1),
                admitted_this_minute=sum(n for m, n in recent if m == minute),
            )
        )
    return out
