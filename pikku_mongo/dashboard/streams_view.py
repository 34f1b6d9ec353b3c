"""A run's streams on its page: the last entries of each, refreshed with the page's live
section while the run is active (so the page tails them)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from engine_core.store import Store
from engine_core.streams import StreamEntry

#: The last entries of a stream the page shows, and the most streams it shows.
TAIL = 50
MAX_STREAMS = 20


@dataclass(frozen=True)
class StreamTail:
    """One stream as the run page shows it: its key, how many entries it has, whether
    it was closed, and its last entries (value as JSON text)."""

    key: str
    length: int
    closed: bool
    entries: list[tuple[StreamEntry, str]]


async def stream_tails(store: Store, run_id: str) -> list[StreamTail]:
    """The run's streams (the first :data:`MAX_STREAMS` by key), each with its last
    :data:`TAIL` entries."""
    keys = (await store.list_streams(run_id))[:MAX_STREAMS]
    return list(await asyncio.gather(*(_tail(store, run_id, key) for key in keys)))


async def _tail(store: Store, run_id: str, key: str) -> StreamTail:
    length = await store.stream_length(run_id, key)
    read = await store.stream_entries(run_id, key, offset=max(length - TAIL, 0), limit=TAIL)
    closed = bool(read) and read[-1].closed
    shown = [(e, json.dumps(e.value, indent=None)) for e in read if not e.closed]
    return StreamTail(key, length - (1 if closed else 0), closed, shown)
