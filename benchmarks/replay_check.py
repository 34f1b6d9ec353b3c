"""``engine.replay_check`` over N stored runs on MongoStore (nx-27017 unless
``MONGODB_URI`` is set): the wall time of one check, and the commands it sends.

Each run is stored as a pass leaves it while waiting for an event: three inline steps in
the run's journal and the event wait in its step record. The runs are written straight
through the store (one insert per run, the step records in bulk), not driven, so the
setup takes seconds. The CPU time of this process and of the server (when the suite
started it) is printed too: on a shared machine it moves less than the wall time.
Usage: python -m benchmarks.replay_check [--runs 10000] [--reps 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import common
from benchmarks.common import mongo_server, open_store
from benchmarks.floor import server_cpu
from engine_core import Engine, WorkflowContext
from engine_core.common.clock import utcnow
from engine_core.records import AttemptEntry, RunRecord, StepRecord
from engine_core.run.divergence import callable_name
from engine_core.run.keys import CURRENT_SCHEME

WORKFLOW = "bench-replay"


def reserve(order: int) -> int:
    return order


def charge(order: int) -> int:
    return order


def ship(order: int) -> int:
    return order


STEPS = (("reserve", reserve), ("charge", charge), ("ship", ship))


def register(engine: Engine, *, moved: bool) -> None:
    @engine.workflow(WORKFLOW)
    async def bench(ctx: WorkflowContext, data: Any) -> Any:
        order = [STEPS[1], STEPS[0], STEPS[2]] if moved else list(STEPS)
        for name, fn in order:
            await ctx.step(name, fn, data)
        return await ctx.wait_for_event("approve")


def stored_run(i: int) -> tuple[RunRecord, StepRecord]:
    now = utcnow()
    run_id = f"replay-{i:06d}"
    journal = {}
    for order, (name, fn) in enumerate(STEPS):
        journal[name] = StepRecord(
            run_id=run_id,
            key=name,
            kind="inline",
            status="succeeded",
            attempts=1,
            result=i,
            updated_at=now,
            ended_at=now,
            history=[AttemptEntry(attempt=1, status="succeeded", at=now, started_at=now)],
            order=order,
            ran=callable_name(fn),
        )
    run = RunRecord(
        run_id=run_id,
        workflow=WORKFLOW,
        status="running",
        input=i,
        created_at=now,
        updated_at=now,
        pending_pass=False,
        passes=1,
        token=1,
        journal=journal,
        key_scheme=CURRENT_SCHEME,
    )
    wait = StepRecord(
        run_id=run_id,
        key="approve",
        kind="event",
        status="scheduled",
        event="approve",
        scheduled_at=now,
        updated_at=now,
        order=len(STEPS),
        ran="approve",
    )
    return run, wait


async def measure(uri: str, runs: int, reps: int) -> None:
    async with open_store("mongo", uri, "replay") as (store, counter, _):
        assert counter is not None
        await store.init()
        began = time.perf_counter()
        for start in range(0, runs, 500):
            batch = [stored_run(i) for i in range(start, min(runs, start + 500))]
            await asyncio.gather(*(store.insert_run(run) for run, _ in batch))
            await store.save_steps([wait for _, wait in batch])
        print(f"stored {runs} runs in {time.perf_counter() - began:.1f} s")
        for moved in (False, True):
            engine = Engine(store)
            register(engine, moved=moved)
            times, commands, cpu, served = [], 0, [], []
            for _ in range(reps):
                before = sum(counter.counts.values())
                server_before = server_cpu(common.SERVER_PID)
                cpu_before = time.process_time()
                began = time.perf_counter()
                report = await engine.replay_check(limit=runs)
                times.append(time.perf_counter() - began)
                cpu.append(time.process_time() - cpu_before)
                server_after = server_cpu(common.SERVER_PID)
                if server_before is not None and server_after is not None:
                    served.append(server_after - server_before)
                commands = sum(counter.counts.values()) - before
                assert report.checked == runs, report.checked
                assert len(report.diverged) == (runs if moved else 0)
            code = "a build that moved a step" if moved else "the same code"
            print(
                f"replay_check over {runs} stored runs, {code}: "
                f"{statistics.median(times):.2f} s (median of {reps}; "
                f"{statistics.median(times) / runs * 1e6:.0f} us per run), "
                f"{commands} commands ({commands / runs:.3f} per run), "
                f"{len(report.diverged)} diverged; CPU {statistics.median(cpu):.2f} s here"
                + (f", {statistics.median(served):.2f} s in the server" if served else "")
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, mongo_server(Path(tmp)) as server:
        print(f"server: {server.label}")
        asyncio.run(measure(server.uri, args.runs, args.reps))


if __name__ == "__main__":
    main()
