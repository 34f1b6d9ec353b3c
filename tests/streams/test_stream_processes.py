"""Streams across processes: a worker killed between writes, a step attempt that dies
mid-stream, and readers in another process than the writer (real processes, nx-27017)."""

from __future__ import annotations

import asyncio

from engine_core import Engine, StreamEntry
from tests.support.fleet import Fleet


async def _read_all(client: Engine, run_id: str, key: str) -> list[StreamEntry]:
    return [entry async for entry in client.read_stream(run_id, key, timeout=60)]


async def test_a_body_writes_each_position_once_across_a_crash(
    fleet: Fleet, client: Engine
) -> None:
    first = fleet.spawn()
    run_id = await client.start("streamer", {"n": 5, "die_at": 2})
    readers = [asyncio.create_task(_read_all(client, run_id, "progress")) for _ in range(2)]
    await asyncio.to_thread(first.wait, 60)  # killed itself in step tick-2
    fleet.spawn()
    assert await client.result(run_id, timeout=60) == 5
    for reader in readers:
        entries = await reader
        assert [(e.position, e.value) for e in entries] == [(i, {"i": i}) for i in range(5)]
        assert all(e.step is None and e.attempt is None for e in entries)
    # Replays after the crash wrote nothing new: the closing entry follows the five.
    later = [e async for e in client.read_stream(run_id, "progress", offset=3)]
    assert [e.position for e in later] == [3, 4]
    assert [r["i"] for r in fleet.records("tick")].count(2) == 2


async def test_a_step_attempt_that_dies_leaves_tagged_entries_and_its_heartbeat(
    fleet: Fleet, client: Engine
) -> None:
    first = fleet.spawn()
    run_id = await client.start("exporter", {"pages": 4})
    reader = asyncio.create_task(_read_all(client, run_id, "pages"))
    await asyncio.to_thread(first.wait, 60)  # the first attempt died after two pages
    fleet.spawn()
    assert await client.result(run_id, timeout=60) == {"resumed_from": 2, "attempt": 2}
    entries = await reader  # ends with the run (the stream was never closed)
    tags = [(e.step, e.attempt, e.n, e.value["page"]) for e in entries]
    assert tags == [
        ("export", 1, 0, 0),
        ("export", 1, 1, 1),
        ("export", 2, 0, 2),
        ("export", 2, 1, 3),
    ]
    assert [e.position for e in entries] == [0, 1, 2, 3]


async def test_a_reader_in_another_process_sees_entries_as_they_come(
    fleet: Fleet, client: Engine
) -> None:
    fleet.spawn()
    run_id = await client.start("writer", {"n": 3})
    seen: list[int] = []
    async for entry in client.read_stream(run_id, "live", timeout=60):
        seen.append(entry.value)
        # Each entry arrives before the run can write the next (it waits for this event).
        await client.send_event(run_id, f"go-{entry.value}", None)
    assert seen == [0, 1, 2]
    assert await client.result(run_id, timeout=60) == 3
