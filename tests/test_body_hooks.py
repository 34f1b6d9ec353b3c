"""The hooks integrations wrap a workflow body's code with (``engine_core.pydantic_ai``
uses them): the body's context as the running code sees it, tasks adopted by the branch
that runs a library, and a task that keeps its own branch when a library copies another
task's context variables into it."""

from __future__ import annotations

import asyncio
import contextvars
import random
from typing import Any

from engine_core import Engine, WorkflowContext
from engine_core.run.branches import adopting_tasks, branch_path
from engine_core.run.context import current_workflow_context


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
