"""Scripted models for the durable-agent tests: pydantic-ai's ``FunctionModel`` answering
each request of a conversation with the next turn of a script, no provider involved."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

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


async def until(predicate: Callable[[], Any], limit: float = 10.0) -> None:
    """Poll ``predicate`` until it holds (an AssertionError after ``limit`` seconds)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("timed out waiting")
        await asyncio.sleep(0.01)
