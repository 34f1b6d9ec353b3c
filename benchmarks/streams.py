"""T1: streams (docs/guides/streams.md) on MongoStore.

* ``ride``: the write commands a workflow of ``steps`` steps sends with one body stream
  write before each step, less those of the same workflow without them, per write
  (target 0: each write rides its step's write).
* ``reader``: a step in a worker process (``python -m benchmarks.streams``) writes
  entries 50 ms apart; this process reads them with ``engine.read_stream``; the figure
  is each entry's arrival here less its write time (one host, one clock): median and
  max in ms (target: median under 30 ms on nx-27017).
* ``size``: the run document's BSON size after its body wrote ``entries`` entries to one
  stream, less that of the same run with none (target 0 bytes), and the entries written
  per second.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import bson

from benchmarks.common import (
    REPO_ROOT,
    Measurement,
    Summary,
    measure_parts,
    open_store,
)
from engine_core import Engine, WorkflowContext, current_step
from engine_core.common.clock import utcnow

WRITES = {"insert", "update", "delete", "findAndModify", "bulkWrite"}
READER_ENTRIES = 40
READER_GAP_S = 0.05


def register(engine: Engine) -> None:
    @engine.workflow("t1-steps")
    async def steps(ctx: WorkflowContext, data: dict[str, Any]) -> int:
        for i in range(data["steps"]):
            if data["write"]:
                await ctx.write_stream("progress", i)
            await ctx.step(f"s{i}", lambda i=i: i)
        return int(data["steps"])

    async def ticker(count: int) -> int:
        info = current_step()
        assert info is not None
        for i in range(count):
            await info.write_stream("ticks", i)
            await asyncio.sleep(READER_GAP_S)
        return count

    @engine.workflow("t1-ticker")
    async def ticker_wf(ctx: WorkflowContext, data: dict[str, Any]) -> int:
        return int(await ctx.step("tick", ticker, data["count"]))

    @engine.workflow("t1-many")
    async def many(ctx: WorkflowContext, data: dict[str, Any]) -> None:
        await ctx.step("before", lambda: 0)
        # Whether to write is in the run id (of one length), so the inputs are equal.
        for i in range(data["entries"] if ctx.run_id.endswith("write") else 0):
            await ctx.write_stream("bulk", {"i": i, "pad": "x" * 100})
        await ctx.step("after", lambda: 0)


async def ride(uri: str, steps: int = 20) -> Measurement:
    used: dict[bool, int] = {}
    for write in (False, True):
        async with open_store("mongo", uri, "t1_ride") as (store, counter, _):
            assert counter is not None
            await store.init()
            engine = Engine(store)
            register(engine)
            async with engine:
                counter.reset()
                began = time.perf_counter()
                run_id = await engine.start("t1-steps", {"steps": steps, "write": write})
                await engine.result(run_id, timeout=120)
                seconds = time.perf_counter() - began
                used[write] = sum(n for name, n in counter.snapshot().items() if name in WRITES)
    extra = (used[True] - used[False]) / steps
    return Measurement(seconds, steps, {}, {"extra_commands_per_write": extra})


async def reader_latency(uri: str) -> Measurement:
    async with open_store("mongo", uri, "t1_reader") as (store, _, db_uri):
        assert db_uri is not None
        await store.init()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "benchmarks.streams", "--uri", db_uri,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            cwd=str(REPO_ROOT), env=env,
        )  # fmt: skip
        try:
            assert proc.stdout is not None and proc.stdin is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 120)
            if line.strip() != b"ready":
                raise RuntimeError("the stream writer did not start")
            client = Engine(store)
            register(client)
            began = time.perf_counter()
            run_id = await client.start("t1-ticker", {"count": READER_ENTRIES})
            lags = []
            async for entry in client.read_stream(run_id, "ticks", timeout=120):
                lags.append((utcnow() - entry.written_at).total_seconds())
            seconds = time.perf_counter() - began
            proc.stdin.close()
            await asyncio.wait_for(proc.wait(), 60)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    median = statistics.median(lags)
    return Measurement(
        seconds, len(lags), {}, {"median_ms": median * 1000, "max_ms": max(lags) * 1000}
    )


async def run_size(uri: str, entries: int = 10_000) -> Measurement:
    sizes: dict[int, int] = {}
    seconds = 0.0
    for count in (0, entries):  # the same run, writing none or all of them
        async with open_store("mongo", uri, "t1_size") as (store, _, _):
            await store.init()
            engine = Engine(store)
            register(engine)
            async with engine:
                began = time.perf_counter()
                name = "t1-write" if count else "t1-none-"
                run_id = await engine.start("t1-many", {"entries": entries}, run_id=name)
                await engine.result(run_id, timeout=600)
                if count:
                    seconds = time.perf_counter() - began
                doc = await store.runs.find_one({"_id": run_id})  # type: ignore[attr-defined]
                assert doc is not None
                sizes[count] = len(bson.encode(_shape(doc)))
                assert await store.stream_length(run_id, "bulk") == count
    return Measurement(
        seconds,
        entries,
        {},
        {"run_doc_growth_bytes": sizes[entries] - sizes[0], "entries_per_s": entries / seconds},
    )


_NUMBERS = re.compile(r"[0-9a-f]*[0-9][0-9a-f]*")


def _shape(doc: dict[str, Any]) -> dict[str, Any]:
    """The run document with each int as a fixed-size int64 and each number inside text
    (and each hex id) as one digit, so runs of different timings compare by what they hold."""
    out: dict[str, Any] = {}
    for key, value in doc.items():
        if isinstance(value, dict):
            out[key] = _shape(value)
        elif isinstance(value, str):
            # Times inside JSON text and random hex ids vary in length from run to run.
            out[key] = _NUMBERS.sub("0", value)
        elif isinstance(value, int) and not isinstance(value, bool):
            out[key] = bson.int64.Int64(value)
        else:
            out[key] = value
    return out


async def measure_all(
    uri: str, progress: Any, failed: Callable[[str, BaseException], None], into: list[Summary]
) -> None:
    """The suite's T1: each part once, its summary appended to ``into``."""
    parts: list[tuple[str, Callable[[], Awaitable[Measurement]]]] = [
        ("ride", lambda: ride(uri)),
        ("reader", lambda: reader_latency(uri)),
        ("size", lambda: run_size(uri)),
    ]
    await measure_parts("T1", parts, progress, failed, into)


async def _serve(uri: str) -> None:
    from pikku_mongo import MongoStore

    store = MongoStore.from_uri(uri)
    engine = Engine(store)
    register(engine)
    try:
        async with engine:
            print("ready", flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    finally:
        await store.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="T1's stream writer process")
    parser.add_argument("--uri", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(_serve(args.uri))


if __name__ == "__main__":
    main()
