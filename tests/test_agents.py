"""Durable pydantic-ai agents (docs/guides/agents.md): an agent given ``PikkuDurability``
runs each model request and tool call as a step of the workflow run it runs in, on
both stores; outside a workflow it behaves as it would without the capability."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, FunctionToolset, ModelRetry, RunContext
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelResponse, ToolReturnPart
from pydantic_ai.models.test import TestModel
from pydantic_ai.run import AgentRunResult

from engine_core import (
    Engine,
    InvalidOptionError,
    WorkflowContext,
    WorkflowRunFailedError,
)
from engine_core.pydantic_ai import PikkuDurability
from tests.support.agents import (
    Script,
    call,
    durable_agent,
    replayed,
    responses,
    run_agent,
)

TOOL = "support__function_toolset__<agent>.call_tool\\:lookup"
MODEL = "support__model.request"


@dataclass
class Order:
    id: int
    total: float


class Answer(BaseModel):
    text: str
    order_id: int


def support_agent(
    script: Script, ran: list[Any], *, durable: bool = True, **options: Any
) -> Agent[None, str]:
    capabilities = [PikkuDurability(**options)] if durable else []
    agent = Agent(script.model(), name="support", capabilities=capabilities)

    @agent.tool_plain
    async def lookup(id: int) -> Order:
        ran.append(("lookup", id))
        return Order(id, 12.5)

    return agent


async def test_model_requests_and_tool_calls_are_steps_of_the_run(engine: Engine) -> None:
    ran: list[Any] = []
    script = Script([call("lookup", id=7)], "Order 7 costs 12.5")
    agent = support_agent(script, ran)

    @engine.workflow("ticket")
    async def ticket(ctx: WorkflowContext, question: str) -> str:
        return (await agent.run(question)).output

    async with engine:
        run_id = await engine.start("ticket", "What does order 7 cost?")
        assert await engine.result(run_id, timeout=10) == "Order 7 costs 12.5"
    status = await engine.status(run_id)
    assert sorted(status.steps) == sorted([MODEL, TOOL, f"{MODEL}#1"])
    assert all(s.status == "succeeded" and s.attempts == 1 for s in status.steps.values())
    recorded = status.steps[TOOL].result  # pydantic-ai's JSON form of the tool's result
    assert (recorded["kind"], recorded["result"]) == ("tool_return", {"id": 7, "total": 12.5})
    assert (script.calls, ran) == (2, [("lookup", 7)])


async def test_a_replay_gives_back_equal_values_of_the_same_types(engine: Engine) -> None:
    ran: list[Any] = []
    script = Script([call("lookup", id=7)], [call("final_result", text="12.5", order_id=7)])
    agent = Agent(
        script.model(),
        name="support",
        output_type=Answer,
        capabilities=[PikkuDurability()],
    )

    @agent.tool_plain
    async def lookup(id: int) -> Order:
        ran.append(id)
        return Order(id, 12.5)

    passes: list[AgentRunResult[Answer]] = []

    @engine.workflow("typed")
    async def typed(ctx: WorkflowContext, data: Any) -> Answer:
        result = await agent.run("How much?")
        passes.append(result)
        await ctx.wait_for_event("go")
        return result.output

    async with engine:
        run_id, output = await replayed(engine, "typed")
    assert output == Answer(text="12.5", order_id=7)
    assert (script.calls, ran) == (2, [7])  # the replay ran nothing again
    first, second = passes
    assert first.output == second.output and type(second.output) is Answer
    assert responses(first.all_messages()) == responses(second.all_messages())
    assert all(type(r) is ModelResponse for r in responses(second.all_messages()))
    returns = [
        [p for m in r.all_messages() for p in getattr(m, "parts", []) if type(p) is ToolReturnPart]
        for r in passes
    ]
    assert [p.content for p in returns[0]] == [p.content for p in returns[1]]
    assert returns[1][0].content == {"id": 7, "total": 12.5}  # as the model saw it both times
    assert first.run_id == second.run_id == f"{run_id}:agent-0"
    assert len(first.new_messages()) == len(second.new_messages()) == 5


async def test_outside_a_workflow_the_agent_runs_as_without_the_capability() -> None:
    outputs = []
    for durable in (False, True):
        ran: list[Any] = []
        script = Script([call("lookup", id=3)], "done")
        result = await support_agent(script, ran, durable=durable).run("hi")
        messages = result.all_messages()
        parts = [[type(p).__name__ for p in m.parts] for m in messages]
        returned = type(messages[2].parts[0].content)  # type: ignore[union-attr]
        outputs.append((result.output, parts, ran, script.calls, returned))
    plain, durable = outputs
    assert plain == durable
    assert plain[:4] == (
        "done",
        [["UserPromptPart"], ["ToolCallPart"], ["ToolReturnPart"], ["TextPart"]],
        [("lookup", 3)],
        2,
    )
    assert plain[4] is Order  # outside a workflow nothing is checkpointed: the value as is


async def test_inside_a_step_the_agent_is_not_durable_of_its_own(engine: Engine) -> None:
    ran: list[Any] = []
    agent = support_agent(Script([call("lookup", id=1)], "done"), ran)

    async def ask() -> str:
        return (await agent.run("hi")).output

    @engine.workflow("in-step")
    async def in_step(ctx: WorkflowContext, data: Any) -> str:
        return await ctx.step("ask", ask)

    async with engine:
        run_id = await engine.start("in-step")
        assert await engine.result(run_id, timeout=10) == "done"
    assert list((await engine.status(run_id)).steps) == ["ask"]


def test_engine_core_imports_without_the_extra_which_the_capability_names() -> None:
    code = (
        "import sys; sys.modules['pydantic_ai'] = None\n"  # as if it were not installed
        "import engine_core\n"
        "try:\n    import engine_core.pydantic_ai\nexcept ImportError as exc:\n    print(exc)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'pikku-mongo[ai]'" in done.stdout


def test_bad_options_and_a_nameless_agent_are_refused_at_construction() -> None:
    with pytest.raises(TypeError, match="retry"):
        PikkuDurability(retry=3)  # type: ignore[call-arg]
    with pytest.raises(InvalidOptionError, match=r"model_retries=.*non-negative integer"):
        PikkuDurability(model_retries=-1)
    with pytest.raises(InvalidOptionError, match="tool_retries"):
        PikkuDurability(tool_retries="2")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="name"):
        Agent(TestModel(), capabilities=[PikkuDurability()])
    agent = Agent(TestModel(), capabilities=[PikkuDurability(name="helper")])
    assert agent.name is None  # the capability names its steps


async def test_a_toolset_given_to_a_run_inside_a_workflow_is_refused(engine: Engine) -> None:
    # Its calls would not be steps: they would run again on every replay.
    extras = FunctionToolset[None](id="extras")

    @extras.tool_plain
    async def extra() -> str:
        return "x"

    agent = support_agent(Script([call("extra")], "done"), [])

    @engine.workflow("runtime-toolset")
    async def runtime_toolset(ctx: WorkflowContext, data: Any) -> str:
        return (await agent.run("hi", toolsets=[extras])).output

    async with engine:
        run_id = await engine.start("runtime-toolset")
        with pytest.raises(WorkflowRunFailedError, match="agent constructor"):
            await engine.result(run_id, timeout=10)
    assert (await support_agent(Script("fine"), []).run("hi", toolsets=[extras])).output == "fine"


async def test_a_failing_model_request_is_retried_and_a_failing_tool_fails_the_run(
    engine: Engine,
) -> None:
    failures = [RuntimeError("provider down")]

    async def flaky(index: int) -> None:
        if index == 0 and failures:
            raise failures.pop()

    ran: list[Any] = []
    agent = support_agent(Script([call("lookup", id=1)], "done", before=flaky), ran)
    broken = durable_agent(Script([call("explode")], "never"), "broken", tool_retries=0)

    @broken.tool_plain
    async def explode() -> str:
        ran.append("explode")
        raise ValueError("the tool broke")

    run_agent(engine, "flaky", agent)
    run_agent(engine, "broken", broken)

    async with engine:
        ok = await engine.start("flaky")
        assert await engine.result(ok, timeout=10) == "done"
        bad = await engine.start("broken")
        with pytest.raises(WorkflowRunFailedError, match="the tool broke"):
            await engine.result(bad, timeout=10)
    assert (await engine.status(ok)).steps[MODEL].attempts == 2
    error = (await engine.status(bad)).error
    assert error is not None and error["error_type"] == "ValueError"
    assert error["step"] == "broken__function_toolset__<agent>.call_tool\\:explode"
    assert ran.count("explode") == 1


async def test_model_retry_keeps_its_meaning(engine: Engine) -> None:
    attempts: list[int] = []
    script = Script([call("lookup", id=1)], [call("lookup", id=2)], "found it")
    agent = durable_agent(script)

    @agent.tool_plain
    async def lookup(id: int) -> str:
        attempts.append(id)
        if id == 1:
            raise ModelRetry("no order 1: try order 2")
        return "order 2"

    run_agent(engine, "retrying", agent, then="go")
    async with engine:
        run_id, output = await replayed(engine, "retrying")
    assert output == "found it"
    assert (attempts, script.calls) == ([1, 2], 3)
    retried = script.seen[1][-1]
    assert "try order 2" in str(retried)
    steps = (await engine.status(run_id)).steps
    assert steps[TOOL].status == steps[f"{TOOL}#1"].status == "succeeded"


async def test_a_value_that_cannot_be_encoded_fails_its_step_at_once(engine: Engine) -> None:
    ran: list[int] = []
    agent = durable_agent(Script([call("opaque")], "never"), tool_retries=3)

    @agent.tool_plain
    async def opaque() -> Any:
        ran.append(1)
        return asyncio.Lock()

    run_agent(engine, "opaque", agent)

    async with engine:
        run_id = await engine.start("opaque")
        with pytest.raises(WorkflowRunFailedError, match="cannot be encoded as JSON"):
            await engine.result(run_id, timeout=10)
    steps = (await engine.status(run_id)).steps
    step = steps["support__function_toolset__<agent>.call_tool\\:opaque"]
    assert (step.status, step.attempts, ran) == ("failed", 1, [1])


async def test_a_run_timeout_counts_from_the_first_start(engine: Engine) -> None:
    deadlines: list[datetime | None] = []
    agent = support_agent(Script("hello"), [])

    @agent.instructions
    def note_deadline(ctx: RunContext[None]) -> str:
        deadlines.append(ctx.deadline)
        return "Be brief."

    @engine.workflow("timed")
    async def timed(ctx: WorkflowContext, data: Any) -> str:
        result = await agent.run("hi", timeout=300)
        await ctx.wait_for_event("go")
        return result.output

    async with engine:
        run_id, output = await replayed(engine, "timed")
    assert output == "hello"
    steps = (await engine.status(run_id)).steps
    assert steps["support__run_start_time"].status == "succeeded"
    assert len(deadlines) == 2 and deadlines[0] == deadlines[1] is not None
