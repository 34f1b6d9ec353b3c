"""The in-memory store's streams and heartbeats."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any

from engine_core.memory.cloning import clone
from engine_core.streams import StreamEntry


class StreamMemory:
    """The stream and heartbeat methods over dicts; readers are woken in process."""

    _streams: dict[tuple[str, str], list[StreamEntry]]
    _heartbeats: dict[tuple[str, str], tuple[int, Any]]
    _stream_waiters: set[asyncio.Queue[None]]

    def _stream_tables(self) -> None:
        if not hasattr(self, "_streams"):
            self._streams = {}
            self._heartbeats = {}
            self._stream_waiters = set()

    async def append_stream(self, entry: StreamEntry) -> StreamEntry | None:
        """:meth:`Store.append_stream <engine_core.store.Store.append_stream>`, in memory."""
        self._stream_tables()
        entries = self._streams.setdefault((entry.run_id, entry.key), [])
        if entry.position < len(entries):
            return entries[entry.position]
        if entry.position > len(entries):
            raise ValueError(
                f"stream {entry.key!r} of run {entry.run_id!r} has {len(entries)} entries: "
                f"position {entry.position} would leave a gap"
            )
        entries.append(StreamEntry(**{**vars(entry), "value": clone(entry.value)}))
        for waiter in self._stream_waiters:
            waiter.put_nowait(None)
        return None

    async def stream_entries(
        self, run_id: str, key: str, *, offset: int, limit: int
    ) -> list[StreamEntry]:
        """:meth:`Store.stream_entries <engine_core.store.Store.stream_entries>`, in memory."""
        self._stream_tables()
        entries = self._streams.get((run_id, key), [])
        return [
            StreamEntry(**{**vars(e), "value": clone(e.value)})
            for e in entries[max(offset, 0) : max(offset, 0) + max(limit, 0)]
        ]

    async def stream_length(self, run_id: str, key: str) -> int:
        """:meth:`Store.stream_length <engine_core.store.Store.stream_length>`, in memory."""
        self._stream_tables()
        return len(self._streams.get((run_id, key), []))

    async def list_streams(self, run_id: str) -> list[str]:
        """:meth:`Store.list_streams <engine_core.store.Store.list_streams>`, in memory."""
        self._stream_tables()
        return sorted(k for (r, k), entries in self._streams.items() if r == run_id and entries)

    def stream_hints(self, run_id: str) -> AsyncIterator[None] | None:
        """:meth:`Store.stream_hints <engine_core.store.Store.stream_hints>`, in memory."""
        self._stream_tables()
        return self._hints()

    async def _hints(self) -> AsyncIterator[None]:
        waiter: asyncio.Queue[None] = asyncio.Queue()
        self._stream_waiters.add(waiter)
        try:
            while True:
                await waiter.get()
                yield None
        finally:
            self._stream_waiters.discard(waiter)

    async def put_heartbeat(self, run_id: str, key: str, *, attempt: int, details: Any) -> None:
        """:meth:`Store.put_heartbeat <engine_core.store.Store.put_heartbeat>`, in memory."""
        self._stream_tables()
        kept = self._heartbeats.get((run_id, key))
        if kept is None or kept[0] <= attempt:
            self._heartbeats[(run_id, key)] = (attempt, clone(details))

    async def get_heartbeat(self, run_id: str, key: str) -> tuple[int, Any] | None:
        """:meth:`Store.get_heartbeat <engine_core.store.Store.get_heartbeat>`, in memory."""
        self._stream_tables()
        kept = self._heartbeats.get((run_id, key))
        return None if kept is None else (kept[0], clone(kept[1]))

    def _drop_streams(self, run_ids: Iterable[str]) -> None:
        self._stream_tables()
        gone = set(run_ids)
        self._streams = {k: v for k, v in self._streams.items() if k[0] not in gone}
        self._heartbeats = {k: v for k, v in self._heartbeats.items() if k[0] not in gone}
