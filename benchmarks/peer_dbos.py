"""The peer: DBOS Transact running W1-W4 with its SQLite system database.

Run in a subprocess of its own (DBOS keeps process-wide state and background threads),
once per workload; each repetition launches DBOS on a new SQLite file, runs the
workload and destroys DBOS. Prints one JSON line per repetition::

    python -m benchmarks.peer_dbos --workload W1 --reps 3 --runs 200 --steps 10 --dir /tmp/x

The workflows are async (``@DBOS.workflow()`` on ``async def``) and started with
``DBOS.start_workflow_async``, their steps are async ``@DBOS.step()`` no-ops and the
sleep is ``DBOS.sleep_async``: the same shapes as this project's workloads.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time
from pathlib import Path

from dbos import DBOS

from benchmarks.common import Measurement
from benchmarks.ours import growth

_stamps: list[float] = []


@DBOS.step()
async def noop_step() -> None:
    return None


@DBOS.step()
async def stamp_step() -> None:
    _stamps.append(time.perf_counter())


@DBOS.workflow()
async def inline_wf(steps: int) -> int:
    for _ in range(steps):
        await noop_step()
    return steps


@DBOS.workflow()
async def stamped_wf(steps: int) -> int:
    for _ in range(steps):
        await stamp_step()
    return steps


@DBOS.workflow()
async def sleep_wf(seconds: float) -> int:
    await noop_step()
    await DBOS.sleep_async(seconds)
    await noop_step()
    return 2


async def w1(runs: int, steps: int) -> Measurement:
    cpu = time.process_time()
    began = time.perf_counter()
    for _ in range(runs):
        handle = await DBOS.start_workflow_async(inline_wf, steps)
        await handle.get_result()
    seconds = time.perf_counter() - began
    return Measurement(seconds, runs * steps, extra={"cpu_s": time.process_time() - cpu})


async def w2(runs: int, steps: int) -> Measurement:
    cpu = time.process_time()
    began = time.perf_counter()
    handles = await asyncio.gather(
        *(DBOS.start_workflow_async(inline_wf, steps) for _ in range(runs))
    )
    for handle in handles:
        await handle.get_result()
    seconds = time.perf_counter() - began
    return Measurement(seconds, runs * steps, extra={"cpu_s": time.process_time() - cpu})


async def w3(steps: int) -> Measurement:
    _stamps.clear()
    began = time.perf_counter()
    handle = await DBOS.start_workflow_async(stamped_wf, steps)
    await handle.get_result()
    seconds = time.perf_counter() - began
    return Measurement(seconds, steps, extra=growth(_stamps, began))


async def w4(runs: int, sleep: float) -> Measurement:
    began = time.perf_counter()
    handles = await asyncio.gather(
        *(DBOS.start_workflow_async(sleep_wf, sleep) for _ in range(runs))
    )
    for handle in handles:
        await handle.get_result()
    seconds = time.perf_counter() - began
    return Measurement(seconds, runs * 3, extra={"overhead_s": seconds - sleep})


async def one_rep(args: argparse.Namespace, rep: int) -> Measurement:
    database = Path(args.dir) / f"dbos-{args.workload}-{rep}.sqlite"
    DBOS(
        config={
            "name": "pikku-bench",
            "system_database_url": f"sqlite:///{database}",
            "log_level": "WARNING",
        }
    )
    DBOS.launch()
    try:
        if args.workload == "W1":
            return await w1(args.runs, args.steps)
        if args.workload == "W2":
            return await w2(args.runs, args.steps)
        if args.workload == "W3":
            return await w3(args.steps)
        if args.workload == "W4":
            return await w4(args.runs, args.sleep)
        raise ValueError(f"unknown workload {args.workload}")
    finally:
        DBOS.destroy()


async def run(args: argparse.Namespace) -> None:
    for rep in range(args.reps):
        measurement = await one_rep(args, rep)
        print(json.dumps({"rep": rep, "measurement": measurement.to_json()}), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", required=True, choices=["W1", "W2", "W3", "W4"])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--sleep", type=float, default=0.5)
    parser.add_argument("--dir", required=True, help="where the SQLite files go")
    args = parser.parse_args(argv)
    logging.getLogger("dbos").setLevel(logging.WARNING)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
