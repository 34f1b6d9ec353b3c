"""``ctx.step(name, fn, *args, **kwargs)``: keyword arguments go to ``fn``; the step
options are keyword-only and never passed on; registered functions may be passed where
their names are asked for."""

from __future__ import annotations

from typing import Any

from engine_core import Engine, WorkflowContext, current_step


async def test_keyword_arguments_reach_the_step_function(engine: Engine) -> None:
    seen: list[Any] = []

    def scale(x: int, *, by: int = 1, note: str = "") -> int:
        seen.append((x, by, note))
        return x * by

    async def add(a: int, b: int) -> int:
        info = current_step()
        assert info is not None and info.step == "add"
        return a + b

    @engine.step_function("double")
    async def double(payload: int) -> int:
        return payload * 2

    @engine.workflow("child")
    async def child(ctx: WorkflowContext, data: int) -> int:
        return data + 1

    @engine.workflow("kw")
    async def kw(ctx: WorkflowContext, data: Any) -> list[int]:
        a = await ctx.step("scale", scale, 3, by=4, note="n", retries=1, timeout=5)
        b = await ctx.step("add", add, 1, b=2)
        c = await ctx.dispatch("double", double, 5)
        d = await ctx.child("child", child, 9)
        return [a, b, c, d]

    async with engine:
        run_id = await engine.start("kw")
        assert await engine.result(run_id, timeout=10) == [12, 3, 10, 10]
    assert seen == [(3, 4, "n")]
