"""The floor: what the server needs for one guarded write, measured in the same run as
W1-W3, and the meters every MongoStore workload reads (client CPU, server CPU, bytes).

The floor is a guarded ``update_one`` by ``_id`` (status and token in the filter, as a
step write's guard) with the store's write concern, on a document the size of a fresh
run document: one at a time, and in unordered bulks of 50 (per write). Server CPU is
the server process's own time (``/proc/PID/stat``), read only where the suite started
the server; bytes are the BSON size of the commands the client sends (the listener
sums them) and the bytes the server process wrote (``/proc/PID/io`` ``wchar``: its
storage and its replies).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pymongo import AsyncMongoClient, UpdateOne

from benchmarks import common
from benchmarks.common import (
    INLINE_WF,
    CommandCounter,
    Measurement,
    Summary,
    drop_database,
    fresh_db_name,
    summarise,
    with_database,
)

#: Writes per bulk in the bulk floor.
BULK = 50
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def server_cpu(pid: int | None) -> float | None:
    """The process time (user + system, seconds) of process ``pid`` and its waited
    children, or None when unknown."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    # utime, stime, cutime, cstime are fields 14-17 (1-based) of the whole line.
    return sum(int(v) for v in fields[11:15]) / _TICK


def server_written(pid: int | None) -> int | None:
    """Bytes process ``pid`` passed to write calls so far (``wchar``), or None."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


@dataclass
class Meter:
    """Client CPU, server CPU and bytes over a timed part (:func:`metered`)."""

    extra: dict[str, float] = field(default_factory=dict)


@contextlib.contextmanager
def metered(counter: CommandCounter | None) -> Iterator[Meter]:
    """Measure the body: ``cpu_s`` (this process), ``server_cpu_s`` and
    ``server_written`` (where the suite started the server) and ``bytes`` (BSON the
    client sent), into the meter's ``extra``."""
    pid = common.SERVER_PID
    meter = Meter()
    s_cpu, s_written = server_cpu(pid), server_written(pid)
    sent = counter.bytes if counter is not None else 0
    cpu = time.process_time()
    yield meter
    meter.extra["cpu_s"] = time.process_time() - cpu
    if counter is not None:
        meter.extra["bytes"] = float(counter.bytes - sent)
    e_cpu, e_written = server_cpu(pid), server_written(pid)
    if s_cpu is not None and e_cpu is not None:
        meter.extra["server_cpu_s"] = e_cpu - s_cpu
    if s_written is not None and e_written is not None:
        meter.extra["server_written"] = float(e_written - s_written)


#: The sequential floor's variant in a collection with the run indexes.
INDEXED = "1 at a time, run indexes"


def floor_document(i: int) -> dict[str, Any]:
    """A fresh run document of the inline workflow, as the store writes it."""
    from engine_core.common.clock import utcnow
    from engine_core.records import RunRecord
    from pikku_mongo.wire.documents import run_to_doc

    now = utcnow()
    run = RunRecord(
        run_id=f"floor-{i:04d}-{uuid.uuid4().hex}",
        workflow=INLINE_WF,
        status="running",
        input={"steps": 10},
        created_at=now,
        updated_at=now,
        token=1,
        wire={"traceparent": f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01"},
    )
    return run_to_doc(run)


@contextlib.asynccontextmanager
async def _collection(
    base_uri: str, docs: int, indexed: bool = False
) -> AsyncIterator[tuple[Any, list[Any], Any]]:
    from pikku_mongo.store.options import DEFAULT_WRITE_CONCERN
    from pikku_mongo.wire.indexes import RUN_INDEXES

    name = fresh_db_name("floor")
    counter = CommandCounter()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        with_database(base_uri, name), event_listeners=[counter]
    )
    concern = common.STORE_OPTIONS.get("write_concern", DEFAULT_WRITE_CONCERN)
    try:
        collection = client[name].get_collection("runs", write_concern=concern)
        if indexed:
            await collection.create_indexes(RUN_INDEXES)
        made = [floor_document(i) for i in range(docs)]
        await collection.insert_many(made)
        yield collection, [d["_id"] for d in made], counter
    finally:
        await client.close()
        await drop_database(base_uri, name)


def _guarded(doc_id: Any, n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    return (
        {"_id": doc_id, "status": "running", "token": 1},
        {"$set": {"updated_at": n, "op": uuid.uuid4().hex}},
    )


async def floor_sequential(base_uri: str, ops: int, indexed: bool = False) -> Measurement:
    """``ops`` guarded updates of one run-sized document, one at a time (``indexed``: in
    a collection with the store's run indexes, none of whose keys the update changes:
    what those indexes cost a server that rewrites them on every update)."""
    async with _collection(base_uri, 1, indexed) as (collection, ids, counter):
        counter.reset()
        began = time.perf_counter()
        with metered(counter) as meter:
            for n in range(ops):
                result = await collection.update_one(*_guarded(ids[0], n))
                assert result.matched_count == 1
        seconds = time.perf_counter() - began
        commands = counter.snapshot()
    return Measurement(seconds, ops, commands, meter.extra)


async def floor_bulk(base_uri: str, ops: int) -> Measurement:
    """``ops`` guarded updates in unordered bulks of :data:`BULK`, one per document."""
    rounds = max(1, ops // BULK)
    async with _collection(base_uri, BULK) as (collection, ids, counter):
        counter.reset()
        began = time.perf_counter()
        with metered(counter) as meter:
            for n in range(rounds):
                result = await collection.bulk_write(
                    [UpdateOne(*_guarded(i, n)) for i in ids], ordered=False
                )
                assert result.matched_count == BULK
        seconds = time.perf_counter() - began
        commands = counter.snapshot()
    return Measurement(seconds, rounds * BULK, commands, meter.extra)


async def run_document_sizes(base_uri: str, steps: int, every: int = 10) -> Measurement:
    """One run of ``steps`` inline steps on MongoStore; every ``every`` steps (from the
    step body, outside any timing) the run document's stored size is read. ``extra``:
    its size at the first and last tenth (bytes), the largest, and the server's bytes
    written per step over the first and last tenth."""
    import bson

    from benchmarks.common import open_store
    from engine_core import Engine, WorkflowContext

    sizes: list[int] = []
    written: list[int] = []
    async with open_store("mongo", base_uri, "docsize") as (store, _, _uri):
        engine = Engine(store)
        runs = getattr(store, "runs")  # noqa: B009 - MongoStore's collection
        run_ids: list[str] = []

        async def probe() -> None:
            pid = common.SERVER_PID
            written.append(server_written(pid) or 0)
            if len(written) % every == 1 and run_ids:
                doc = await runs.find_one({"_id": run_ids[0]})
                sizes.append(len(bson.encode(doc)) if doc else 0)

        @engine.workflow("docsize")
        async def body(ctx: WorkflowContext, n: int) -> int:
            for i in range(n):
                await ctx.step(f"s{i}", probe)
            return n

        async with engine:
            began = time.perf_counter()
            run_id = await engine.start("docsize", steps)
            run_ids.append(run_id)
            await engine.result(run_id, timeout=900)
            seconds = time.perf_counter() - began
    tenth = max(2, len(written) // 10)
    extra: dict[str, float] = {
        "doc_first": float(sizes[1] if len(sizes) > 1 else 0),
        "doc_last": float(sizes[-1] if sizes else 0),
        "doc_max": float(max(sizes, default=0)),
    }
    if common.SERVER_PID is not None:
        extra["written_first"] = (written[tenth] - written[1]) / (tenth - 1)
        extra["written_last"] = (written[-1] - written[-tenth]) / (tenth - 1)
    return Measurement(seconds, steps, {}, extra)


async def floor_section(
    uri: str,
    ops: int,
    steps: int,
    repeat: Callable[[str, Callable[[], Awaitable[Measurement]]], Awaitable[list[Measurement]]],
    failed: Callable[[str, BaseException], None],
) -> list[Summary]:
    """The suite's floor: each floor ``repeat``ed, then the run document's size along a
    run of ``steps`` (a failure is reported to ``failed`` and skipped)."""
    out: list[Summary] = []
    parts: list[tuple[str, Callable[[], Awaitable[Measurement]]]] = [
        ("1 at a time", lambda: floor_sequential(uri, ops)),
        (f"bulks of {BULK}", lambda: floor_bulk(uri, ops)),
        (INDEXED, lambda: floor_sequential(uri, ops, indexed=True)),
    ]
    for label, fn in parts:
        try:
            out.append(summarise("floor", "mongo", label, await repeat(f"floor ({label})", fn)))
        except Exception as exc:
            failed(f"floor ({label})", exc)
    try:
        out.append(summarise("docsize", "mongo", "", [await run_document_sizes(uri, steps)]))
    except Exception as exc:
        failed("run document size", exc)
    return out


if __name__ == "__main__":  # pragma: no cover - a manual check

    async def _main() -> None:
        uri = os.environ["MONGODB_URI"]
        for fn in (floor_sequential, floor_bulk):
            m = await fn(uri, 500)
            print(fn.__name__, m.seconds / m.steps * 1000, m.extra)

    asyncio.run(_main())
