"""Scripted models for the durable-agent tests (pydantic-ai's ``FunctionModel`` answering
each request of a conversation with the next turn of a script, no provider involved),
durable agents on them, and workflows that run an agent."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from engine_core import Engine, WorkflowContext
from engine_core.pydantic_ai import PikkuDurability
from tests.support.waiting import reaches

#: One turn: the text the model answers, or the tool calls it makes (name, args).
Turn = str | list[tuple[str, dict[str, Any]]]


def call(name: str, **args: Any) -> tuple[str, dict[str, Any]]:
    return (name, args)


class Script:
    """Answers the n-th request of a conversation (n: the responses it already holds)
    with ``turns[n]`` (the last turn once past the end), counting the requests it gets;
    ``before`` is awaited before each answer (to hold a request in flight)."""

    def __init__(self, *turns: Turn, before: Callable[[int], Awaitable[None]] | None = None):
        self.turns = turns
        self.before = before
        self.calls = 0
        self.seen: list[list[ModelMessage]] = []

    async def _turn(self, messages: list[ModelMessage]) -> tuple[int, Turn]:
        self.calls += 1
        self.seen.append(list(messages))
        index = sum(isinstance(m, ModelResponse) for m in messages)
        if self.before is not None:
            await self.before(index)
        return index, self.turns[min(index, len(self.turns) - 1)]

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        index, turn = await self._turn(messages)
        if isinstance(turn, str):
            return ModelResponse(parts=[TextPart(turn)])
        return ModelResponse(
            parts=[
                ToolCallPart(name, args, tool_call_id=f"call-{index}-{i}")
                for i, (name, args) in enumerate(turn)
            ]
        )

    async def stream(
        self, messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        """The same turns, streamed (a text in words, tool calls whole)."""
        index, turn = await self._turn(messages)
        if isinstance(turn, str):
            for word in turn.split(" "):
                yield word if not word or word == turn.split(" ")[0] else f" {word}"
            return
        yield {
            i: DeltaToolCall(name, json.dumps(args), tool_call_id=f"call-{index}-{i}")
            for i, (name, args) in enumerate(turn)
        }

    def model(self) -> FunctionModel:
        return FunctionModel(self, stream_function=self.stream)


def responses(messages: Sequence[ModelMessage]) -> list[ModelResponse]:
    """The model responses of a conversation."""
    return [m for m in messages if isinstance(m, ModelResponse)]


def durable_agent(script: Script, name: str = "support", **options: Any) -> Agent[None, Any]:
    """An agent on ``script`` with ``PikkuDurability(**options)``."""
    return Agent(script.model(), name=name, capabilities=[PikkuDurability(**options)])


def run_agent(
    engine: Engine, workflow: str, agent: Agent[Any, Any], *, then: str | None = None
) -> None:
    """Register ``workflow``: it runs ``agent`` on "hi", then (with ``then``) waits for
    the event of that name (a second pass replays the agent), and returns its output."""

    @engine.workflow(workflow)
    async def body(ctx: WorkflowContext, data: Any) -> Any:
        result = await agent.run("hi")
        if then is not None:
            await ctx.wait_for_event(then)
        return result.output


async def replayed(engine: Engine, workflow: str, event: str = "go") -> tuple[str, Any]:
    """Start ``workflow`` in a serving ``engine``, let it park on ``event``, send it (the
    next pass replays what came before) and return the run id and the output."""
    run_id = await engine.start(workflow)
    await reaches(engine, run_id, event)
    await engine.send_event(run_id, event, None)
    return run_id, await engine.result(run_id, timeout=30)
