"""``engine.fork`` and ``engine.fork_many`` on MongoStore (nx-27017 unless
``MONGODB_URI`` is set).

- A fork of a run of 1,000 finished steps (then a failed one): the commands one fork
  sends, and its wall time.
- ``fork_many`` over N failed runs (three finished steps each, then the failed one):
  runs forked per second, and the peak of Python memory allocated while it runs
  (``tracemalloc``; the pass is bound by the server, not by tracing).

The runs are written straight through the store, not driven; the forks are not driven
either (no workflow is registered). Usage:
python -m benchmarks.fork [--steps 1000] [--runs 10000] [--reps 3] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

from benchmarks.common import mongo_server, open_store
from engine_core import Engine
from engine_core.common.clock import utcnow
from engine_core.records import AttemptEntry, RunRecord, StepRecord
from engine_core.run.keys import CURRENT_SCHEME

WORKFLOW = "bench-fork"


def failed_run(run_id: str, finished: int) -> tuple[RunRecord, list[StepRecord]]:
    """A failed run: ``finished`` succeeded steps, then ``pay`` failed."""
    now = utcnow()
    steps = [
        StepRecord(
            run_id=run_id,
            key=f"s{i}",
            kind="inline",
            status="succeeded",
            attempts=1,
            result={"i": i, "note": "x" * 40},
            updated_at=now,
            ended_at=now,
            history=[AttemptEntry(attempt=1, status="succeeded", at=now, started_at=now)],
            order=i,
            ran="shop:step",
        )
        for i in range(finished)
    ]
    error = {"type": "StepFailedError", "message": "provider down", "step": "pay"}
    steps.append(
        StepRecord(
            run_id=run_id,
            key="pay",
            kind="inline",
            status="failed",
            attempts=3,
            max_attempts=3,
            error={"type": "ConnectionError", "message": "provider down"},
            updated_at=now,
            ended_at=now,
            order=finished,
            ran="shop:pay",
        )
    )
    run = RunRecord(
        run_id=run_id,
        workflow=WORKFLOW,
        status="failed",
        input={"order": run_id},
        created_at=now,
        updated_at=now,
        error={**error, "error_type": "ConnectionError"},
        pending_pass=False,
        passes=2,
        token=2,
        key_scheme=CURRENT_SCHEME,
    )
    return run, steps


async def one_fork(uri: str, finished: int, reps: int) -> None:
    async with open_store("mongo", uri, "fork") as (store, counter, _):
        assert counter is not None
        await store.init()
        run, steps = failed_run("big", finished)
        await store.insert_run(run)
        await store.save_steps(steps)
        engine = Engine(store)
        times, commands = [], []
        for _ in range(reps):
            counts = counter.snapshot()
            before = sum(counter.counts.values())
            began = time.perf_counter()
            fork = await engine.fork("big")
            times.append(time.perf_counter() - began)
            commands.append(sum(counter.counts.values()) - before)
            by_name = {k: v - counts.get(k, 0) for k, v in counter.snapshot().items()}
            assert len(await store.load_steps(fork)) == finished
        print(
            f"fork of a run of {finished} finished steps: {statistics.median(commands):.0f} "
            f"commands, {statistics.median(times) * 1000:.0f} ms "
            f"(median of {reps}; {', '.join(f'{k} {v}' for k, v in sorted(by_name.items()) if v)})"
        )


async def fork_many(uri: str, runs: int) -> None:
    async with open_store("mongo", uri, "forkmany") as (store, counter, _):
        assert counter is not None
        await store.init()
        began = time.perf_counter()
        for start in range(0, runs, 500):
            batch = [failed_run(f"failed-{i:06d}", 3) for i in range(start, min(runs, start + 500))]
            await asyncio.gather(*(store.insert_run(run) for run, _ in batch))
            await store.save_steps([s for _, steps in batch for s in steps])
        print(f"stored {runs} failed runs in {time.perf_counter() - began:.1f} s")
        engine = Engine(store)
        before = sum(counter.counts.values())
        tracemalloc.start()
        began = time.perf_counter()
        report = await engine.fork_many(workflow=WORKFLOW, status="failed")
        took = time.perf_counter() - began
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        sent = sum(counter.counts.values()) - before
        assert (report.matched, report.done) == (runs, runs), report
        print(
            f"fork_many over {runs} failed runs: {runs / took:.0f} runs/s ({took:.1f} s), "
            f"{sent / runs:.1f} commands per run; peak Python memory while forking "
            f"{peak / 2**20:.1f} MiB (tracemalloc)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1,000 runs, one repetition")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.reps = 1000, 1
    with tempfile.TemporaryDirectory() as tmp, mongo_server(Path(tmp)) as server:
        print(f"server: {server.label}")
        asyncio.run(one_fork(server.uri, args.steps, args.reps))
        asyncio.run(fork_many(server.uri, args.runs))


if __name__ == "__main__":
    main()
