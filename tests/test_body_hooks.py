"""The hooks integrations wrap a workflow body's code with (``engine_core.pydantic_ai``
uses them): the body's context as the running code sees it, tasks adopted by the branch
that runs a library, a task that keeps its own branch when a library copies another
task's context variables into it, and outcomes held for the next step's write."""

from __future__ import annotations

import asyncio
import contextvars
import random
from typing import Any

import pytest

from engine_core import Engine, WorkflowContext
from engine_core.run.body_hooks import current_workflow_context, holding_outcomes
from engine_core.run.branches import adopting_tasks, branch_path


async def test_the_running_code_finds_the_bodys_context_but_not_inside_a_step(
    engine: Engine,
) -> None:
    seen: dict[str, Any] = {}

    async def in_a_step() -> None:
        seen["step"] = current_workflow_context()

    async def in_a_branch(ctx: WorkflowContext) -> None:
        seen["branch"] = current_workflow_context() is ctx
        seen["path"] = branch_path()

    @engine.workflow("hooks")
    async def hooks(ctx: WorkflowContext, data: Any) -> None:
        seen["body"] = current_workflow_context() is ctx
        await ctx.step("s", in_a_step)
        await asyncio.gather(in_a_branch(ctx), asyncio.sleep(0))

    async with engine:
        await engine.result(await engine.start("hooks"), timeout=10)
    assert seen == {"body": True, "step": None, "branch": True, "path": "0"}
    assert current_workflow_context() is None


async def test_adopted_tasks_count_with_their_branch_and_take_no_place_among_its_own(
    engine: Engine,
) -> None:
    ran: list[str] = []

    async def one(ctx: WorkflowContext, name: str) -> str:
        await asyncio.sleep(random.random() / 100)  # reach the step at any time
        return await ctx.step(name, lambda: ran.append(name) or name)

    @engine.workflow("adopting")
    async def adopting(ctx: WorkflowContext, data: Any) -> list[str]:
        with adopting_tasks():
            # A library's tasks, as many as the timing makes, and calls of distinct names.
            helpers = [asyncio.ensure_future(asyncio.sleep(0)) for _ in range(random.randint(0, 5))]
            got = list(await asyncio.gather(one(ctx, "a"), one(ctx, "b"), *helpers))[:2]
        got += await asyncio.gather(one(ctx, "c"), one(ctx, "c"))
        await ctx.wait_for_event("go")
        return got

    async with engine:
        run_id = await engine.start("adopting")
        while "go" not in (await engine.status(run_id)).steps:
            await asyncio.sleep(0.02)
        await engine.send_event(run_id, "go", None)
        assert await engine.result(run_id, timeout=10) == ["a", "b", "c", "c"]
    assert sorted(ran) == ["a", "b", "c", "c"]  # the replay ran nothing again
    assert sorted((await engine.status(run_id)).steps) == ["a", "b", "c@0", "c@1", "go"]


async def test_a_task_keeps_its_branch_when_another_tasks_context_is_copied_into_it(
    engine: Engine,
) -> None:
    @engine.workflow("copied")
    async def copied(ctx: WorkflowContext, data: Any) -> str:
        captured: list[contextvars.Context] = []

        async def elsewhere() -> None:
            captured.append(contextvars.copy_context())

        await asyncio.gather(elsewhere(), asyncio.sleep(0))
        for var, value in captured[0].items():  # as pydantic-ai does after its wrap_run
            var.set(value)
        path = branch_path()
        await ctx.step("mine", lambda: None)
        return path

    async with engine:
        run_id = await engine.start("copied")
        assert await engine.result(run_id, timeout=10) == ""
    assert list((await engine.status(run_id)).steps) == ["mine"]


async def noop() -> None:
    return None


@pytest.mark.parametrize("hold", [0.0, 5.0])
async def test_under_a_hold_outcomes_ride_the_next_steps_write(engine: Engine, hold: float) -> None:
    # The body yields between its steps while it computes: without a hold each outcome
    # is written on its own as soon as it yields; under one, the next step's write
    # carries it (and the run's last write the last one).
    writes: list[int] = []
    record_steps = engine.store.record_steps

    async def counted(*args: Any, **kwargs: Any) -> Any:
        writes.append(1)
        return await record_steps(*args, **kwargs)

    engine.store.record_steps = counted  # type: ignore[method-assign]

    @engine.workflow("held")
    async def held(ctx: WorkflowContext, data: Any) -> None:
        with holding_outcomes(hold):
            for i in range(5):
                await ctx.step(f"s{i}", noop)
                for _ in range(3):
                    await asyncio.sleep(0)

    async with engine:
        await engine.result(await engine.start("held"), timeout=10)
    assert (len(writes) == 0) if hold else (len(writes) >= 4)


async def test_a_held_outcome_is_written_once_the_hold_is_over(engine: Engine) -> None:
    seen = asyncio.Event()

    @engine.workflow("waits")
    async def waits(ctx: WorkflowContext, data: Any) -> None:
        with holding_outcomes(0.05):
            await ctx.step("s", noop)
            await seen.wait()  # no step comes: the outcome is written on its own

    async with engine:
        run_id = await engine.start("waits")
        for _ in range(250):
            steps = (await engine.status(run_id)).steps
            if "s" in steps and steps["s"].status == "succeeded":
                break
            await asyncio.sleep(0.02)
        seen.set()
        await engine.result(run_id, timeout=10)
    assert steps["s"].status == "succeeded"
