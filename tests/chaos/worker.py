"""A worker process for the chaos tests: serves until killed.

Every step execution is appended to a log file (one JSON line, written before the step
returns), so the tests count executions independently of the store.

    python -m tests.chaos.worker URI LOG [--lease-ttl 1s] [--max-clock-skew 0s]
                                 [--no-functions] [--no-workflows]

Every worker runs on this one host, so the store's clock skew bound defaults to 0 here.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import time
from typing import Any

from engine_core import Engine, WorkflowContext, current_step
from tests.support.execution_log import LOG_PATH, record
from tests.support.fleet import serve_until_killed, worker_engine, worker_parser


async def quick(tag: str) -> str:
    record("step", tag=tag)
    return tag


async def slow(tag: str, seconds: float) -> str:
    record("step-start", tag=tag)
    await asyncio.sleep(seconds)
    record("step", tag=tag)
    return tag


async def returns_then_dies() -> str:
    """Returns on its first attempt and kills the process before anything else happens:
    the outcome exists only in memory (it rides on the next write, which never comes)."""
    info = current_step()
    record("step-start")
    if info is not None and info.attempt == 1:
        asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signal.SIGKILL)
    return "returned"


def suicide() -> None:
    record("step-start")
    os.kill(os.getpid(), signal.SIGKILL)


def register(engine: Engine, functions: bool, workflows: bool) -> None:
    if functions:

        @engine.step_function("chaos-job")
        async def chaos_job(payload: dict[str, Any]) -> dict[str, Any]:
            record("job-start")
            await asyncio.sleep(payload.get("seconds", 0.05))
            record("job")
            return {"done": payload["n"]}

    if not workflows:
        return

    @engine.workflow("crashy")
    async def crashy(ctx: WorkflowContext, data: Any) -> list[str]:
        a = await ctx.step("a", quick, "a")
        b = await ctx.step("b", slow, "b", data.get("slow", 2.0), retries=2)
        c = await ctx.step("c", quick, "c")
        return [a, b, c]

    @engine.workflow("sleepy")
    async def sleepy(ctx: WorkflowContext, data: Any) -> float:
        await ctx.step("before", quick, "before")
        await ctx.sleep("nap", data["seconds"])
        return float(await ctx.step("after", lambda: time.time()))

    @engine.workflow("dispatchy")
    async def dispatchy(ctx: WorkflowContext, data: Any) -> Any:
        jobs = [
            ctx.dispatch(
                f"job-{i}",
                "chaos-job",
                {"n": i, "seconds": data.get("seconds", 0.05)},
                retries=data.get("retries", 3),
            )
            for i in range(data.get("jobs", 1))
        ]
        return await asyncio.gather(*jobs)

    @engine.workflow("pass-counter")
    async def pass_counter(ctx: WorkflowContext, data: Any) -> str:
        record("pass", run=ctx.run_id)
        return str(await ctx.step("only", quick, "only"))

    @engine.workflow("dies-after-return")
    async def dies_after_return(ctx: WorkflowContext, data: Any) -> list[str]:
        a = await ctx.step("a", returns_then_dies, retries=1)
        await asyncio.sleep(data.get("pause", 0))  # the body computes between two steps
        b = await ctx.step("b", quick, "b")
        return [a, b]

    @engine.workflow("suicidal")
    async def suicidal(ctx: WorkflowContext, data: Any) -> None:
        await ctx.step("fatal", suicide, retries=2)


async def serve(args: argparse.Namespace) -> None:
    engine = worker_engine(args, stalled_after=args.stalled_after)
    register(engine, not args.no_functions, not args.no_workflows)
    await serve_until_killed(engine)


def main() -> None:
    parser = worker_parser(lease_ttl="1s", recovery_interval="0.5s", max_clock_skew="0s")
    parser.add_argument("--stalled-after", default="5m")
    parser.add_argument("--no-functions", action="store_true")
    parser.add_argument("--no-workflows", action="store_true")
    args = parser.parse_args()
    LOG_PATH["path"] = args.log
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
