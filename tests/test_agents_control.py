"""Durable agents under the engine's controls: cancel, fork, divergence after a deploy
that changed the agent's tools, and the run's stream ``"agent"`` (docs/guides/agents.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import TypeAdapter
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, RunContext
from pydantic_ai.messages import AgentStreamEvent

from engine_core import Engine, WorkflowContext, WorkflowRunCancelledError
from engine_core.pydantic_ai import PikkuDurability
from tests.support.agents import Script, call, durable_agent, run_agent
from tests.support.waiting import reaches

MODEL = "support__model.request"
TOOL = "support__function_toolset__<agent>.call_tool\\:"


def lookup_agent(script: Script, ran: list[int], tool: str = "lookup", **options: Any) -> Agent:
    agent = Agent(script.model(), name="support", capabilities=[PikkuDurability(**options)])

    async def lookup(id: int) -> str:
        ran.append(id)
        return f"order {id}"

    agent.tool_plain(name=tool)(lookup)
    return agent


async def drain(ctx: RunContext[None], events: Any) -> None:
    """An ``event_stream_handler`` that only takes the events."""
    async for _ in events:
        pass


async def test_cancelling_the_run_stops_the_agent_at_its_next_step(engine: Engine) -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    async def hold_second(index: int) -> None:
        if index == 1:
            entered.set()
            await release.wait()

    ran: list[int] = []
    script = Script([call("lookup", id=1)], [call("lookup", id=2)], "done", before=hold_second)
    agent = lookup_agent(script, ran)

    run_agent(engine, "cancelled", agent)

    async with engine:
        run_id = await engine.start("cancelled")
        await asyncio.wait_for(entered.wait(), 10)  # the second model request is in flight
        await engine.cancel(run_id)
        release.set()
        with pytest.raises(WorkflowRunCancelledError):
            await engine.result(run_id, timeout=10)
        await asyncio.sleep(0.2)
    assert (ran, script.calls) == ([1], 2)  # no tool call and no request after it
    steps = (await engine.status(run_id)).steps
    assert f"{TOOL}lookup#1" not in steps and f"{MODEL}#2" not in steps


async def test_a_fork_reuses_the_model_requests_recorded_before_its_step(
    engine: Engine,
) -> None:
    ran: list[int] = []
    script = Script([call("lookup", id=1)], [call("lookup", id=2)], "done")
    agent = lookup_agent(script, ran)

    run_agent(engine, "forked", agent)

    async with engine:
        run_id = await engine.start("forked")
        assert await engine.result(run_id, timeout=10) == "done"
        assert (script.calls, ran) == (3, [1, 2])
        late = await engine.fork(run_id, from_step=f"{MODEL}#2")
        assert await engine.result(late, timeout=10) == "done"
        assert (script.calls, ran) == (4, [1, 2])  # only the last request again
        mid = await engine.fork(run_id, from_step=f"{TOOL}lookup#1")
        assert await engine.result(mid, timeout=10) == "done"
        assert (script.calls, ran) == (5, [1, 2, 2])  # the second tool call and after
    forked_steps = (await engine.status(late)).steps
    assert forked_steps[MODEL].attempts == 1 and forked_steps[f"{MODEL}#2"].attempts == 1


async def test_changing_the_agents_tools_is_caught_as_a_divergence(
    make_engine: Callable[..., Engine],
) -> None:
    ran: list[int] = []
    old_code, new_code = make_engine(), make_engine()
    script = Script([call("lookup", id=1)], "done")
    for engine, tool in ((old_code, "lookup"), (new_code, "find_order")):
        agent = lookup_agent(script, ran, tool=tool)

        @engine.workflow("deployed")
        async def deployed(ctx: WorkflowContext, data: Any, agent: Agent = agent) -> str:
            result = await agent.run("hi")
            await ctx.wait_for_event("go")
            return result.output

    async with old_code:
        run_id = await old_code.start("deployed")
        await reaches(old_code, run_id, "go")
    assert (await old_code.replay_check(workflow="deployed")).diverged == []
    report = await new_code.replay_check(workflow="deployed")
    assert [d.run_id for d in report.diverged] == [run_id]
    async with new_code:
        await new_code.send_event(run_id, "go", None)
        for _ in range(500):
            status = await new_code.status(run_id)
            if status.status == "suspended":
                break
            await asyncio.sleep(0.02)
    assert status.status == "suspended" and status.error is not None
    assert status.error["type"] == "NonDeterminismError"
    assert status.error["step"] == f"{TOOL}lookup"
    assert (ran, script.calls) == ([1], 2)  # the model was not asked again


async def test_the_agents_events_are_written_once_to_the_runs_stream(engine: Engine) -> None:
    ran: list[int] = []
    handled: list[str] = []
    in_steps: list[str] = []

    async def in_a_step(ctx: RunContext[None], events: Any) -> None:
        async for event in events:
            in_steps.append(event.event_kind)

    script = Script([call("lookup", id=1), call("lookup", id=2)], "done")
    agent = lookup_agent(script, ran, event_stream_handler=in_a_step)

    async def handler(ctx: RunContext[None], events: Any) -> None:
        async for event in events:
            handled.append(event.event_kind)

    @engine.workflow("streamed")
    async def streamed(ctx: WorkflowContext, data: Any) -> str:
        result = await agent.run("hi", event_stream_handler=handler)
        await ctx.wait_for_event("go")
        return result.output

    async with engine:
        run_id = await engine.start("streamed")
        await reaches(engine, run_id, "go")
        first = [e.value async for e in _entries(engine, run_id)]
        await engine.send_event(run_id, "go", None)
        assert await engine.result(run_id, timeout=10) == "done"
        entries = [e async for e in engine.read_stream(run_id, "agent", timeout=5)]
    assert [e.value for e in entries] == first  # the replay wrote nothing again
    assert [e.position for e in entries] == list(range(len(entries)))
    adapter: TypeAdapter[Any] = TypeAdapter(AgentStreamEvent)
    events = [adapter.validate_python(e.value["event"]) for e in entries]
    kinds = [e.event_kind for e in events]
    assert kinds.count("function_tool_call") == kinds.count("function_tool_result") == 2
    assert {e.value["agent"] for e in entries} == {"support"}
    assert {e.value["agent_run_id"] for e in entries} == {f"{run_id}:agent-0"}
    assert handled == kinds * 2  # a run's own handler runs in the body: on every pass
    # The capability's handler runs in steps: each event it gets, once.
    # The capability's handler runs in steps (the model's events live, in the request's):
    # each event once, whatever the passes.
    assert in_steps == kinds


async def _entries(engine: Engine, run_id: str) -> Any:
    """The stream's entries so far (it is still open)."""
    seen = 0
    async for entry in engine.read_stream(run_id, "agent", timeout=5):
        yield entry
        seen += 1
        if await _written(engine, run_id) == seen:
            return


async def _written(engine: Engine, run_id: str) -> int:
    return await engine.store.stream_length(run_id, "agent")


async def test_a_run_without_an_event_handler_writes_no_events(engine: Engine) -> None:
    # pydantic-ai streams its tool calls' events through the capability even so.
    agent = lookup_agent(Script([call("lookup", id=1)], "done"), [])

    run_agent(engine, "quiet", agent)

    async with engine:
        run_id = await engine.start("quiet")
        assert await engine.result(run_id, timeout=10) == "done"
    assert await engine.store.stream_length(run_id, "agent") == 0


async def test_a_resumed_runs_first_events_are_written_once_it_streams(engine: Engine) -> None:
    # A run resumed with approvals runs the approved call before its first model
    # request: its events wait for that request, which streams (a handler is given).
    ran: list[int] = []
    script = Script([call("refund", id=7)], "refunded")
    agent = Agent(
        script.model(),
        name="support",
        output_type=[str, DeferredToolRequests],
        capabilities=[PikkuDurability()],
    )

    @agent.tool_plain(requires_approval=True)
    async def refund(id: int) -> str:
        ran.append(id)
        return "ok"

    @engine.workflow("approved")
    async def approved(ctx: WorkflowContext, data: Any) -> str:
        first = await agent.run("refund 7", event_stream_handler=drain)
        assert isinstance(first.output, DeferredToolRequests)
        results = DeferredToolResults(
            approvals={c.tool_call_id: True for c in first.output.approvals}
        )
        second = await agent.run(
            message_history=first.all_messages(),
            deferred_tool_results=results,
            event_stream_handler=drain,
        )
        return str(second.output)

    async with engine:
        run_id = await engine.start("approved")
        assert await engine.result(run_id, timeout=10) == "refunded"
        entries = [e.value async for e in engine.read_stream(run_id, "agent", timeout=5)]
    kinds = [(e["agent_run_id"][-7:], e["event"]["event_kind"]) for e in entries]
    assert ("agent-1", "function_tool_result") in kinds  # the approved refund's
    assert kinds.index(("agent-1", "function_tool_call")) < kinds.index(("agent-1", "part_start"))
    assert ran == [7]


async def test_an_event_too_large_for_an_entry_is_written_as_a_stand_in(engine: Engine) -> None:
    agent = durable_agent(Script([call("big")], "done"))

    @agent.tool_plain
    async def big() -> str:
        return "x" * 300_000  # its result event is over an entry's 256 KiB

    @engine.workflow("big")
    async def big_wf(ctx: WorkflowContext, data: Any) -> str:
        return (await agent.run("hi", event_stream_handler=drain)).output

    async with engine:
        run_id = await engine.start("big")
        assert await engine.result(run_id, timeout=10) == "done"
        entries = [e.value async for e in engine.read_stream(run_id, "agent", timeout=5)]
    (result,) = [e for e in entries if e["event"]["event_kind"] == "function_tool_result"]
    assert result == {
        "agent": "support",
        "agent_run_id": f"{run_id}:agent-0",
        "event": {"event_kind": "function_tool_result"},
        "omitted": True,
    }
