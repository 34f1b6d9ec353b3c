"""Engine overhead per inline step on the in-memory store (microseconds).

Runs a workflow of N no-op inline steps and divides the wall time by N, against a
baseline that awaits the same no-op N times without the engine. Medians of several
repetitions. Usage: python -m benchmarks.step_overhead [--steps 1000] [--reps 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from engine_core import Engine, WorkflowContext
from engine_core.memory import InMemoryStore


async def noop() -> None:
    return None


async def engine_run(steps: int) -> float:
    engine = Engine(InMemoryStore())

    @engine.workflow("bench")
    async def bench(ctx: WorkflowContext, data: Any) -> int:
        for i in range(steps):
            await ctx.step(f"s{i}", noop)
        return steps

    async with engine:
        began = time.process_time()  # CPU time: steadier than wall time on a shared box
        run_id = await engine.start("bench")
        await engine.result(run_id, timeout=600)
        return time.process_time() - began


async def baseline(steps: int) -> float:
    began = time.process_time()
    for _ in range(steps):
        await noop()
    return time.process_time() - began


async def main(steps: int, reps: int) -> None:
    with_engine = [await engine_run(steps) for _ in range(reps)]
    without = [await baseline(steps) for _ in range(reps)]
    per_step = (statistics.median(with_engine) - statistics.median(without)) / steps * 1e6
    print(f"inline no-op steps: {steps} per run, {reps} runs")
    print(f"engine overhead per inline step (in-memory store, CPU time): {per_step:.1f} us")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.steps, args.reps))
