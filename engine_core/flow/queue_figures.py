"""What ``engine.list_queues`` shows: each queue's limits, depth and admissions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine_core.common.clock import Clock
from engine_core.common.status import QueueStatus
from engine_core.flow.queues import QueueLimits, parse_rate, rate_text
from engine_core.store import Store

#: The keys waiting in a fair line that a queue's figures name (those with most runs).
TOP_WAITING_KEYS = 5


def limits_doc(limits: QueueLimits) -> dict[str, Any]:
    """A queue's declared limits as the store and the registry of workers keep them."""
    return {
        "concurrency": limits.concurrency,
        "worker_concurrency": limits.worker_concurrency,
        "key_concurrency": limits.key_concurrency,
        "rate": rate_text(limits.rate),
        "key_rate": rate_text(limits.key_rate),
        "fairness": limits.fairness,
    }


def limits_of(name: str, doc: dict[str, Any]) -> QueueLimits:
    """A queue's limits as the store (or a worker's record) keeps them."""
    rate, key_rate = doc.get("rate"), doc.get("key_rate")
    return QueueLimits(
        name,
        concurrency=doc.get("concurrency"),
        worker_concurrency=doc.get("worker_concurrency"),
        key_concurrency=doc.get("key_concurrency"),
        rate=parse_rate(rate) if isinstance(rate, str) else None,
        key_rate=parse_rate(key_rate) if isinstance(key_rate, str) else None,
        fairness="key" if doc.get("fairness") == "key" else None,
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


async def queue_figures(
    store: Store, declared: Mapping[str, QueueLimits], clock: Clock
) -> list[QueueStatus]:
    """The queues declared here, declared by any serving process (their limits are
    stored) or holding runs in the store, sorted by name. This process's declaration
    wins; a queue declared nowhere shows no limits. ``clock``: the engine's, whose
    minutes the admissions are counted in."""
    out = []
    stored = await store.list_queue_limits()
    names = sorted(set(declared) | set(stored) | set(await store.queue_names()))
    for name in names:
        limits = declared.get(name) or limits_of(name, stored.get(name, {}))
        counts = await store.count_queue(name)
        state = await store.get_queue_state(name)
        minute = int(clock.now().timestamp() // 60)
        recent = state.minutes if state is not None else []
        waiting = await store.count_waiting_keys(name) if limits.fair else {}
        top = sorted(waiting.items(), key=lambda kn: (-kn[1], kn[0] is not None, kn[0] or ""))
        out.append(
            QueueStatus(
                name=name,
                concurrency=limits.concurrency,
                worker_concurrency=limits.worker_concurrency,
                key_concurrency=limits.key_concurrency,
                rate=rate_text(limits.rate),
                queued=counts.get("queued", 0),
                active=sum(n for s, n in counts.items() if s != "queued"),
                admitted_last_minute=sum(n for m, n in recent if m == minute - 1),
                admitted_this_minute=sum(n for m, n in recent if m == minute),
                key_rate=rate_text(limits.key_rate),
                fairness=limits.fairness,
                keys_waiting=len(waiting),
                top_waiting_keys=tuple(top[:TOP_WAITING_KEYS]),
            )
        )
    return out
