"""The store protocol's streams and heartbeats (docs/guides/streams.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from engine_core.streams import StreamEntry


class StreamStore(Protocol):
    """Streams and heartbeats. Part of :class:`~engine_core.store.Store`."""

    # ---- streams (docs/guides/streams.md; engine_core.streams) -----------------

    async def append_stream(self, entry: StreamEntry) -> StreamEntry | None:
        """Insert ``entry`` at its stream position unless taken: None when this call
        inserted it (also when a repeat after a lost reply finds its own first try), else
        the entry holding the position. Of concurrent appends at a position one lands."""

    async def stream_entries(
        self, run_id: str, key: str, *, offset: int, limit: int
    ) -> list[StreamEntry]:
        """Up to ``limit`` entries of the stream from position ``offset`` on, in order of
        position (one query, served by an index)."""

    async def stream_length(self, run_id: str, key: str) -> int:
        """One more than the stream's highest position; 0 for a stream with no entry."""

    async def list_streams(self, run_id: str) -> list[str]:
        """The keys of the run's streams that have an entry, sorted."""

    def stream_hints(self, run_id: str) -> AsyncIterator[None] | None:
        """Wake-ups for readers of the run's streams: yields when an entry of the run may
        have been appended by any process (a hint, never a promise), or None when the
        store has no way to tell; readers then poll with a backoff."""

    async def put_heartbeat(self, run_id: str, key: str, *, attempt: int, details: Any) -> None:
        """Keep ``details`` as the last heartbeat of step ``key`` (from ``attempt``),
        replacing the one kept, unless that one is from a later attempt."""

    async def get_heartbeat(self, run_id: str, key: str) -> tuple[int, Any] | None:
        """The attempt and details of step ``key``'s last heartbeat, or None."""
