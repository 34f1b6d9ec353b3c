"""pydantic-ai's durable units as steps of the run: the operation backend.

pydantic-ai hands the backend each model request, tool call, MCP call, tool discovery
and event-handler call as a named unit (``body``): here it becomes one inline step of the
workflow run that the agent runs in (``ctx.step``), named by pydantic-ai's journal namer,
with the retries of its role. The unit's result crosses the checkpoint as pydantic-ai's
own JSON form (its ``JSON_CODEC``, dumped inside the step); pydantic-ai reads it back as
its own types, so the first pass and every replay see equal values of the same type.

Each step runs one of the functions below, by role, so that the run records what it ran
as ``engine_core.pydantic_ai.units:model_call`` and the like (a name that does not move
with pydantic-ai's internals).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from pydantic_ai.durable_exec import (
    DurableOperationId,
    JournalCallableOperationBackend,
    ModelRequestId,
    RoleBasedOperationConfig,
)
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart

from engine_core.common.durations import Duration
from engine_core.pydantic_ai.events import run_events
from engine_core.run.body_hooks import current_workflow_context

Unit = Callable[[], Awaitable[object]]


async def model_call(unit: Unit) -> object:
    """A model request (or a model's compaction or cancellation) of an agent."""
    return await unit()


async def tool_call(unit: Unit) -> object:
    """A tool call (function, MCP or dynamic tool), its arguments' validation or a
    toolset's discovery."""
    return await unit()


async def event_handler(unit: Unit) -> object:
    """One event handed to the capability's ``event_stream_handler``."""
    return await unit()


async def capability_call(unit: Unit) -> object:
    """A durable operation of another capability of the agent (a workspace call...)."""
    return await unit()


@dataclass(frozen=True)
class StepOptions:
    """How the units of one role run as steps."""

    retries: int
    retry_delay: Duration
    runner: Callable[[Unit], Awaitable[object]]


def step_options(model_retries: int, tool_retries: int) -> RoleBasedOperationConfig[StepOptions]:
    """The step options by role: model requests with ``model_retries``, everything else
    (tools, MCP, discovery, event handling, capability calls) with ``tool_retries``."""
    return RoleBasedOperationConfig(
        model=StepOptions(model_retries, "exponential", model_call),
        event=StepOptions(tool_retries, "exponential", event_handler),
        capability=StepOptions(tool_retries, "exponential", capability_call),
        tool=StepOptions(tool_retries, "exponential", tool_call),
    )


#: The running tool call's place among the calls of its model response, as a suffix of
#: its step names ("" when it is the response's only call).
_CALL_LABEL: ContextVar[str] = ContextVar("engine_core_pydantic_ai_call", default="")


@contextmanager
def tool_call_scope(call: ToolCallPart, messages: Sequence[ModelMessage]) -> Iterator[None]:
    """Around one tool call's validation or execution: its units' step names tell it
    apart from the other calls of its model response, by its place in that response (not
    by when it gets to run, which differs from pass to pass)."""
    token = _CALL_LABEL.set(call_label(call, messages))
    try:
        yield
    finally:
        _CALL_LABEL.reset(token)


def call_label(call: ToolCallPart, messages: Sequence[ModelMessage]) -> str:
    """``[i]``, the call's place among the tool calls of the model response that made it,
    when that response made more than one ("" otherwise); ``[tool call id]`` when no
    response in ``messages`` holds the call."""
    for message in reversed(messages):
        if not isinstance(message, ModelResponse):
            continue
        calls = [p.tool_call_id for p in message.parts if isinstance(p, ToolCallPart)]
        if call.tool_call_id in calls:
            return f"[{calls.index(call.tool_call_id)}]" if len(calls) > 1 else ""
    return f"[{call.tool_call_id}]"


class StepBackend(JournalCallableOperationBackend[StepOptions]):
    """Runs each unit as one inline step of the workflow run the agent runs in."""

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: StepOptions,
    ) -> object:
        ctx = current_workflow_context()
        if ctx is None:  # pydantic-ai asks for units only where in_durable_context holds
            raise RuntimeError(f"the durable unit {name!r} was called outside a workflow body")
        if isinstance(operation_id, ModelRequestId) and (events := run_events()) is not None:
            await events.model_request(operation_id.streaming)
        return await ctx.step(
            name + _CALL_LABEL.get(),
            config.runner,
            body,
            retries=config.retries,
            retry_delay=config.retry_delay,
        )
