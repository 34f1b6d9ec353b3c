"""Durable agents across passes: parallel tool calls that end in another order on a
replay, a pass that dies mid-tool, the body's own branches beside and after an agent,
and agents running concurrently in one workflow (docs/guides/agents.md)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ToolReturnPart

from engine_core import Engine, WorkflowContext, WorkflowRunFailedError
from engine_core.pydantic_ai import PikkuDurability
from tests.support.agents import Script, call
from tests.support.waiting import reaches

TOOLS = "support__function_toolset__<agent>.call_tool\\:"


def three_tools(script: Script, ran: list[str], hold: dict[str, Any], **options: Any) -> Agent:
    """An agent whose tools ``a``, ``b`` and ``c`` each return their argument; a tool in
    ``hold`` first awaits what ``hold`` maps it to."""
    agent = Agent(script.model(), name="support", capabilities=[PikkuDurability(**options)])

    for name in ("a", "b", "c"):

        async def tool(n: int, name: str = name) -> str:
            ran.append(name)
            if name in hold:
                await hold[name]()
            return f"{name}{n}"

        agent.tool_plain(name=name)(tool)
    return agent


async def drive_until_done(engine: Engine, run_id: str, passes: int = 5) -> None:
    for _ in range(passes):
        if (await engine.status(run_id)).status != "running":
            return
        try:
            await engine.drive(run_id)
        except asyncio.CancelledError:
            pass
        await engine.store.request_pass(run_id)


async def test_parallel_tool_calls_run_once_and_replay_in_any_order(engine: Engine) -> None:
    # First pass: c ends first, then b; a's pass dies while a runs (its process died).
    # Second pass: b and c come back from their records at once, a runs again: the
    # calls end in another order, and each gets its own result.
    ran: list[str] = []
    script = Script([call("a", n=1), call("b", n=2), call("c", n=3)], "done")
    dies = [True]

    async def a_dies() -> None:
        await asyncio.sleep(0.3)  # b's and c's outcomes are written meanwhile
        if dies:
            dies.clear()
            raise asyncio.CancelledError()  # the pass dies mid-step, recording nothing

    hold = {"a": a_dies, "b": lambda: asyncio.sleep(0.05)}
    agent = three_tools(script, ran, hold, tool_retries=1)
    outputs: list[list[Any]] = []

    @engine.workflow("fan-out")
    async def fan_out(ctx: WorkflowContext, data: Any) -> str:
        result = await agent.run("go")
        outputs.append(
            [
                (p.tool_name, p.content)
                for m in result.all_messages()
                for p in getattr(m, "parts", [])
                if isinstance(p, ToolReturnPart)
            ]
        )
        return result.output

    run_id = await engine.start("fan-out")
    await drive_until_done(engine, run_id)
    assert await engine.result(run_id, timeout=5) == "done"
    assert Counter(ran) == {"a": 2, "b": 1, "c": 1} and script.calls == 2
    assert outputs == [[("a", "a1"), ("b", "b2"), ("c", "c3")]]
    steps = (await engine.status(run_id)).steps
    assert {k: s.attempts for k, s in steps.items() if k.startswith(TOOLS)} == {
        f"{TOOLS}a[0]": 2,  # the lost attempt counts
        f"{TOOLS}b[1]": 1,
        f"{TOOLS}c[2]": 1,
    }


async def test_with_no_tool_retries_a_tool_a_crash_interrupted_is_not_run_again(
    engine: Engine,
) -> None:
    ran: list[str] = []

    async def dies() -> None:
        raise asyncio.CancelledError()

    agent = three_tools(Script([call("a", n=1)], "done"), ran, {"a": dies})

    @engine.workflow("at-most-once")
    async def at_most_once(ctx: WorkflowContext, data: Any) -> str:
        return (await agent.run("go")).output

    run_id = await engine.start("at-most-once")
    await drive_until_done(engine, run_id)
    with pytest.raises(WorkflowRunFailedError, match="WorkerLost"):
        await engine.result(run_id, timeout=5)
    assert ran == ["a"]


@pytest.mark.parametrize("together", [True, False])
async def test_the_bodys_branches_keep_their_keys_beside_and_after_agents(
    engine: Engine, together: bool
) -> None:
    # Agents run (two at once in branches of the body, or one in the body itself), each
    # with parallel tool calls, then the body runs branches of its own; replayed after an
    # event, nothing runs again and nothing diverges, though the tasks pydantic-ai makes
    # vary in number with the calls' timing.
    ran: list[str] = []
    helpers: list[int] = []
    scripts = [Script([call("a", n=i), call("b", n=i)], f"done {i}") for i in (1, 2)]
    agents = [three_tools(s, ran, {"b": lambda: asyncio.sleep(0.02)}) for s in scripts]

    async def helper(ctx: WorkflowContext, i: int) -> int:
        return await ctx.step("helper", lambda: helpers.append(i) or i)

    @engine.workflow("crowd")
    async def crowd(ctx: WorkflowContext, data: Any) -> list[Any]:
        if together:
            results = list(await asyncio.gather(*(a.run("go") for a in agents)))
        else:
            results = [await a.run("go") for a in agents]
        mine = await asyncio.gather(helper(ctx, 0), helper(ctx, 1))
        await ctx.wait_for_event("go")
        return [r.output for r in results] + list(mine)

    async with engine:
        run_id = await engine.start("crowd")
        await reaches(engine, run_id, "go", limit=10)
        await engine.send_event(run_id, "go", None)
        assert await engine.result(run_id, timeout=10) == ["done 1", "done 2", 0, 1]
    assert sorted(helpers) == [0, 1] and Counter(ran) == {"a": 2, "b": 2}
    assert [s.calls for s in scripts] == [2, 2]
    keys = sorted((await engine.status(run_id)).steps)
    assert len([k for k in keys if k.startswith("helper@")]) == 2
    assert len([k for k in keys if k.startswith(TOOLS)]) == 4
