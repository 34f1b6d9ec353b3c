"""Concurrent branches of a body that reuse a step name: every call gets its own recorded
result on every replay, whatever the timing (issue 36), or the run is suspended."""

from __future__ import annotations

import asyncio
from typing import Any

from engine_core import Engine, WorkflowContext
from engine_core.run.keys import step_key
from tests.support.waiting import wait_run, wait_step


async def _echo(value: str) -> str:
    return value


async def test_branches_that_reuse_a_step_name_keep_their_results_on_replay(
    engine: Engine,
) -> None:
    passes = {"n": 0}

    async def branch(ctx: WorkflowContext, label: str) -> list[str]:
        out = []
        for i in range(3):
            if passes["n"] == 1 and label == "x":
                await asyncio.sleep(0.03)  # slow on the first pass: the calls interleave
            out.append(await ctx.step("w", _echo, f"{label}{i}"))
        return out

    @engine.workflow("fan")
    async def fan(ctx: WorkflowContext, data: Any) -> Any:
        passes["n"] += 1
        x, y = await asyncio.gather(branch(ctx, "x"), branch(ctx, "y"))
        await ctx.wait_for_event("go")  # parks: the next pass replays the gather
        return {"x": x, "y": y}

    async with engine:
        run_id = await engine.start("fan")
        await wait_step(engine, run_id, "go", "scheduled")
        # A dry replay keys the calls as a pass does: it finds nothing diverging.
        report = await engine.replay_check(run_ids=[run_id])
        assert (report.checked, report.diverged) == (1, [])
        await engine.send_event(run_id, "go", None)
        out = await engine.result(run_id, timeout=20)
    assert passes["n"] == 3  # the first pass, the dry replay, the pass after "go"
    assert out == {"x": ["x0", "x1", "x2"], "y": ["y0", "y1", "y2"]}
    steps = (await engine.status(run_id)).steps
    # Each branch counts its own ordinals, and its keys name it.
    assert {k: s.result for k, s in steps.items() if k != "go"} == {
        step_key("w", i, 3, str(b)): f"{label}{i}" for b, label in enumerate("xy") for i in range(3)
    }


async def test_gathered_direct_calls_keep_their_plain_keys(engine: Engine) -> None:
    @engine.workflow("direct")
    async def direct(ctx: WorkflowContext, data: Any) -> Any:
        items = await asyncio.gather(*(ctx.step("item", _echo, f"i{n}") for n in range(3)))
        pair = await asyncio.gather(ctx.step("a", _echo, "a"), ctx.step("b", _echo, "b"))
        await ctx.wait_for_event("go")
        return [items, pair]

    async with engine:
        run_id = await engine.start("direct")
        await wait_step(engine, run_id, "go", "scheduled")
        await engine.send_event(run_id, "go", None)
        assert await engine.result(run_id, timeout=20) == [["i0", "i1", "i2"], ["a", "b"]]
    steps = (await engine.status(run_id)).steps
    assert {k: s.result for k, s in steps.items() if k != "go"} == {
        "item": "i0",
        "item#1": "i1",
        "item#2": "i2",
        "a": "a",
        "b": "b",
    }


async def test_tasks_the_engine_cannot_name_suspend_the_run(engine: Engine) -> None:
    async def branch(ctx: WorkflowContext, label: str) -> str:
        await asyncio.sleep(0)
        return await ctx.step("w", _echo, label)

    @engine.workflow("unnamed")
    async def unnamed(ctx: WorkflowContext, data: Any) -> Any:
        # Made by the Task class itself, past the loop's task factory: the engine cannot
        # tell which is which on the next pass.
        tasks = [asyncio.Task(branch(ctx, label)) for label in "xy"]
        return await asyncio.gather(*tasks)

    async with engine:
        run_id = await engine.start("unnamed")
        await wait_run(engine, run_id, "suspended")
    st = await engine.status(run_id)
    assert st.error is not None and st.error["type"] == "NonDeterminismError"
    assert st.error["step"].startswith("w")
    assert "distinct names" in st.error["message"]


async def test_a_branch_that_waits_between_steps_raises_no_false_alarm(engine: Engine) -> None:
    # On the first pass branch "a" is the slow one, on the replay branch "b": the replay
    # reaches a's recorded steps while b's, recorded before them, wait well past any
    # "let the other branches catch up" delay. Only a branch's own order is judged.
    passes = {"n": 0}

    async def branch(ctx: WorkflowContext, label: str) -> list[str]:
        slow = (label == "a") == (passes["n"] == 1)
        out = []
        for i in range(2):
            if slow:
                await asyncio.sleep(0.3)
            out.append(await ctx.step("s", _echo, f"{label}{i}"))
        return out

    @engine.workflow("paced")
    async def paced(ctx: WorkflowContext, data: Any) -> Any:
        passes["n"] += 1
        got = await asyncio.gather(branch(ctx, "a"), branch(ctx, "b"))
        await ctx.wait_for_event("go")
        return got

    async with engine:
        run_id = await engine.start("paced")
        await wait_step(engine, run_id, "go", "scheduled")
        await engine.send_event(run_id, "go", None)
        assert await engine.result(run_id, timeout=20) == [["a0", "a1"], ["b0", "b1"]]


async def test_a_step_moved_before_a_gather_diverges_and_a_patch_check_does_not(
    engine: Engine,
) -> None:
    code = {"v": 1}

    async def helper(ctx: WorkflowContext, label: str) -> str:
        await asyncio.sleep(0)
        return await ctx.step("h", _echo, label)

    @engine.workflow("moved")
    async def moved(ctx: WorkflowContext, data: Any) -> Any:
        if code["v"] == 3 and await ctx.patched("new-path"):
            await ctx.step("new", _echo, "new")
        if code["v"] in (1, 3):
            first = await ctx.step("first", _echo, "first")
            got = await asyncio.gather(helper(ctx, "x"), helper(ctx, "y"))
        else:  # v2: the gather moved before the step
            got = await asyncio.gather(helper(ctx, "x"), helper(ctx, "y"))
            first = await ctx.step("first", _echo, "first")
        await ctx.wait_for_event("go")
        return [first, got]

    async with engine:
        run_id = await engine.start("moved")
        await wait_step(engine, run_id, "go", "scheduled")
        code["v"] = 2
        report = await engine.replay_check(run_ids=[run_id])
        # The branches were made before the body's first step: where they ran moved.
        assert [d.step for d in report.diverged] == ["h@0"]
        assert "another place of the body" in report.diverged[0].reason
        code["v"] = 3  # the original order, behind a patch check this run passed
        assert (await engine.replay_check(run_ids=[run_id])).diverged == []
        await engine.send_event(run_id, "go", None)
        assert await engine.result(run_id, timeout=20) == ["first", ["x", "y"]]
