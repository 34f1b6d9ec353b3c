"""Workflows the fault tests run, and the check that no step ran again after its success.

Every step execution appends one JSON line to the side-effect log
(:mod:`tests.support.execution_log`; ``start`` before the step's body runs, ``end`` after
it), with its run, step and attempt, so a test can tell how often each step really ran,
whatever the store says.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from engine_core import Engine, WorkflowContext
from engine_core.common.journal import merged_steps
from tests.support.execution_log import record


async def work(tag: str, seconds: float) -> str:
    record("start")
    await asyncio.sleep(seconds)
    record("end")
    return tag


def register(engine: Engine, *, functions: bool = True, workflows: bool = True) -> None:
    if functions:

        @engine.step_function("fault-job")
        async def fault_job(payload: dict[str, Any]) -> str:
            return await work(f"job-{payload['n']}", payload.get("seconds", 0.05))

    if not workflows:
        return

    @engine.workflow("mixed")
    async def mixed(ctx: WorkflowContext, data: Any) -> list[str]:
        """An inline step, a dispatched one, a durable sleep, an inline step."""
        seconds = data.get("seconds", 0.05)
        a = await ctx.step("a", work, "a", seconds, retries=3, retry_delay="200ms")
        job = await ctx.dispatch("job", "fault-job", {"n": data["n"], "seconds": seconds},
                                 retries=3, retry_delay="200ms")  # fmt: skip
        await ctx.sleep("nap", data.get("nap", 0.3))
        c = await ctx.step("c", work, "c", seconds, retries=3, retry_delay="200ms")
        return [a, job, c]

    @engine.workflow("slow-inline")
    async def slow_inline(ctx: WorkflowContext, data: Any) -> str:
        return str(await ctx.step("slow", work, "slow", data["seconds"], retries=3))

    @engine.workflow("slow-job")
    async def slow_job(ctx: WorkflowContext, data: Any) -> str:
        job = {"n": 0, "seconds": data["seconds"]}
        return str(await ctx.dispatch("slow", "fault-job", job, retries=3))


def mixed_output(n: int) -> list[str]:
    return ["a", f"job-{n}", "c"]


async def assert_no_step_ran_after_its_success(
    engine: Engine, run_ids: list[str], log: list[dict[str, Any]]
) -> None:
    """Each attempt ran at most once; no step ran again once its success was recorded
    (an execution numbered past the succeeded attempt); one success recorded per step."""
    starts = Counter((r["run"], r["step"], r["attempt"]) for r in log if r["kind"] == "start")
    twice = sorted(key for key, n in starts.items() if n > 1)
    detail = [r for r in log if twice and (r["run"], r["step"]) == twice[0][:2]]
    assert not twice, f"attempts that ran twice: {twice[:10]} {detail}"
    problems: list[str] = []
    for run_id in run_ids:
        run = await engine.store.get_run(run_id)
        assert run is not None, run_id
        # The run's view: step records with the run's journal over them.
        for step in merged_steps(run, await engine.store.load_steps(run_id)):
            wins = [e for e in step.history if e.status == "succeeded"]
            if step.status != "succeeded":
                continue
            if len(wins) != 1:
                problems.append(f"{run_id}/{step.key}: {len(wins)} successes recorded")
            again = [
                a for (r, s, a) in starts if r == run_id and s == step.key and a > step.attempts
            ]
            if again:
                problems.append(
                    f"{run_id}/{step.key}: succeeded at attempt {step.attempts}, "
                    f"then ran attempt(s) {sorted(again)}"
                )
    assert not problems, problems[:10]
