"""What ``engine.list_queues`` shows: each queue's limits, depth and admissions."""

from __future__ import annotations

from engine_core.flow.queues import QueueLimits
from engine_core.records import utcnow
from engine_core.status import QueueStatus
from engine_core.store import Store


async def queue_figures(store: Store, declared: dict[str, QueueLimits]) -> list[QueueStatus]:
    """The queues declared here or holding runs in the store, sorted by name (a queue
    only seen in the store, by a tool that declared nothing, shows no limits)."""
    out = []
    names = sorted(set(declared) | set(await store.queue_names()))
    for name in names:
        limits = declared.get(name) or QueueLimits(name)
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
