"""Conformance cases for streams and heartbeats (docs/guides/streams.md)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from engine_core.common.clock import utcnow
from engine_core.store import Store
from engine_core.streams import StreamEntry
from engine_core.testing.builders import make_run


def entry(position: int, value: Any = None, *, key: str = "progress", **tag: Any) -> StreamEntry:
    """The stream entry at ``position`` of run-1's stream ``key``."""
    at = utcnow().replace(microsecond=654321) + timedelta(seconds=position)
    return StreamEntry("run-1", key, position, value, at, **tag)


class StreamCases:
    """What a store must do with stream entries and heartbeats."""

    async def test_entries_append_once_per_position_and_read_in_order(self, store: Store) -> None:
        """Entries append once per position and read in order."""
        assert await store.stream_length("run-1", "progress") == 0
        assert await store.stream_entries("run-1", "progress", offset=0, limit=10) == []
        values: list[Any] = [{"done": 1, "$set": "inert"}, "two", [3, None], 4.5]
        # Made once: ``entry`` reads the clock, and a second boundary may pass meanwhile.
        appended = [entry(position, value) for position, value in enumerate(values)]
        for each in appended:
            assert await store.append_stream(each) is None
        first = entry(0, {"done": 1, "$set": "inert"})
        there = await store.append_stream(entry(0, "another"))
        assert there is not None and there.value == first.value
        assert await store.stream_length("run-1", "progress") == 4
        read = await store.stream_entries("run-1", "progress", offset=1, limit=2)
        assert [(e.position, e.value) for e in read] == [(1, "two"), (2, [3, None])]
        assert read[0] == appended[1]

    async def test_a_step_tag_and_a_closing_entry_round_trip(self, store: Store) -> None:
        """A step tag and a closing entry round trip."""
        tagged = entry(0, "tok", key="tokens", step="llm#1", attempt=2, n=7)
        await store.append_stream(tagged)
        closing = entry(1, key="tokens", closed=True)
        await store.append_stream(closing)
        read = await store.stream_entries("run-1", "tokens", offset=0, limit=5)
        assert read == [tagged, closing]
        assert (read[0].step, read[0].attempt, read[0].n, read[1].closed) == ("llm#1", 2, 7, True)

    async def test_streams_are_kept_apart_by_run_and_key(self, store: Store) -> None:
        """Streams are kept apart by run and key."""
        await store.append_stream(entry(0, "a", key="k"))
        await store.append_stream(entry(0, "b", key="k.2"))
        await store.append_stream(StreamEntry("run-10", "k", 0, "c", utcnow()))
        assert await store.list_streams("run-1") == ["k", "k.2"]
        assert [e.value for e in await store.stream_entries("run-1", "k", offset=0, limit=9)] == [
            "a"
        ]
        assert await store.stream_length("run-10", "k") == 1
        assert await store.list_streams("nothing") == []

    async def test_concurrent_appends_at_one_position_land_once(self, store: Store) -> None:
        """Concurrent appends at one position land once."""
        results = await asyncio.gather(*(store.append_stream(entry(0, i)) for i in range(8)))
        assert sum(r is None for r in results) == 1
        stored = await store.stream_entries("run-1", "progress", offset=0, limit=9)
        assert len(stored) == 1 and all(r is None or r == stored[0] for r in results)

    async def test_heartbeats_keep_the_latest_attempt(self, store: Store) -> None:
        """Heartbeats keep the latest attempt."""
        assert await store.get_heartbeat("run-1", "export") is None
        await store.put_heartbeat("run-1", "export", attempt=1, details={"page": 3})
        await store.put_heartbeat("run-1", "export", attempt=1, details={"page": 4})
        assert await store.get_heartbeat("run-1", "export") == (1, {"page": 4})
        await store.put_heartbeat("run-1", "export", attempt=2, details=None)
        await store.put_heartbeat("run-1", "export", attempt=1, details={"page": 5})
        assert await store.get_heartbeat("run-1", "export") == (2, None)

    async def test_deleting_a_finished_run_deletes_its_streams(self, store: Store) -> None:
        """Deleting a finished run deletes its streams."""
        for run_id in ("gone", "kept"):
            run = make_run(run_id)
            run.status = "completed"
            run.updated_at = utcnow() - timedelta(days=2)
            await store.insert_run(run)
            await store.append_stream(StreamEntry(run_id, "s", 0, 1, utcnow()))
            await store.put_heartbeat(run_id, "step", attempt=1, details=1)
        kept = await store.get_run("kept")
        assert kept is not None
        await store.set_run_status("kept", "running", expect=["completed"])
        deleted = await store.delete_runs(finished_before=utcnow() - timedelta(days=1), limit=10)
        assert deleted == 1
        assert await store.stream_length("gone", "s") == 0
        assert await store.get_heartbeat("gone", "step") is None
        assert await store.stream_length("kept", "s") == 1
