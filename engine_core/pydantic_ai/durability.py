"""``PikkuDurability``: the pydantic-ai durability capability that runs an agent's model
requests, tool calls and MCP calls as steps of the workflow run it runs in.

Built on pydantic-ai's public durability API (``pydantic_ai.durable_exec``):
pydantic-ai decides what is a durable unit and names it (its journal namer); the
backend (:mod:`engine_core.pydantic_ai.units`) runs each unit as one inline step. This
module says where the workflow is (:meth:`PikkuDurability.in_durable_context`), keeps the
agent's run ids the same on every replay, and keeps the steps' keys independent of
timing when tool calls run in parallel:

- pydantic-ai runs each tool call of a model response in a task of its own, beside
  helper tasks whose number depends on when the calls end. Under the agent's run those
  tasks are adopted by the branch of the body that runs the agent
  (``engine_core.run.branches.adopting_tasks``): they take no place among its branches
  (so the body's later branches keep their keys) and their steps count with it.
- A tool call's steps are named by its place in its model response (``...:lookup[1]``
  for the second call of a response that made several), never by the order in which the
  calls get to run: see :func:`engine_core.pydantic_ai.units.call_label`.

Under the agent's run a unit's outcome also waits a moment for the next unit's write
(``holding_outcomes``): one write per unit, though pydantic-ai yields to the loop between
units. The events a run streams to a handler go to the run's stream ``"agent"``
(:mod:`engine_core.pydantic_ai.events`).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast
from weakref import WeakKeyDictionary

from pydantic_ai.agent import EventStreamHandler
from pydantic_ai.agent.abstract import AbstractAgent
from pydantic_ai.capabilities import (
    RawToolArgs,
    ValidatedToolArgs,
    WrapRunHandler,
    WrapToolExecuteHandler,
    WrapToolValidateHandler,
)
from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    DurabilityEngineSpec,
    conversation_id_from_run_id,
)
from pydantic_ai.messages import AgentStreamEvent, ToolCallPart
from pydantic_ai.models import Model
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tool_manager import ToolManager
from pydantic_ai.tools import AgentDepsT, RunContext, ToolDefinition

from engine_core.common.clock import Clock
from engine_core.common.values import check_retries
from engine_core.errors import InvalidOptionError, NotSerializableError
from engine_core.pydantic_ai.events import AgentEvents, agent_events, run_events
from engine_core.pydantic_ai.units import StepBackend, step_options, tool_call_scope
from engine_core.run.body_hooks import current_workflow_context, holding_outcomes
from engine_core.run.branches import adopting_tasks, branch_path
from engine_core.run.context import WorkflowContext, clock_of

#: How long a finished unit's outcome waits for the next unit's write to carry it:
#: pydantic-ai yields to the loop between an agent's units (its graph runs each node in
#: a task) while it only computes, so without a hold each outcome would be written on its
#: own, two writes a step instead of one.
OUTCOME_HOLD_S = 0.05
#: Agent runs started with no run id so far in each pass, by branch of the body.
_RUNS: WeakKeyDictionary[WorkflowContext, dict[str, int]] = WeakKeyDictionary()


def _not_serializable(exc: Exception) -> BaseException:
    return NotSerializableError(
        f"a value of the agent's run cannot be encoded as JSON to checkpoint it: {exc}; "
        "return JSON-encodable values (pydantic models, dataclasses, dicts...) from tools"
    )


def _retries(value: object, option: str) -> int:
    try:
        return check_retries(value)
    except ValueError:
        raise InvalidOptionError(
            f"PikkuDurability({option}=...) takes a non-negative integer (the step's "
            f"retries), not {value!r}"
        ) from None


async def _now(clock: Clock) -> datetime:
    return clock.now()


@dataclass(init=False, kw_only=True)
class PikkuDurability(BaseDurabilityCapability[AgentDepsT]):
    """Makes an agent durable inside pikku-mongo workflows (docs/guides/agents.md).

    Inside a workflow body, each model request and tool call of the agent (function
    tools, MCP servers' and dynamic toolsets' tools) and each MCP server's tool listing
    is one step of the run; outside one, the agent runs as it would without this
    capability. ``model_retries`` are the model requests' step retries and
    ``tool_retries`` every other step's, waiting ``"exponential"`` between attempts.
    ``name`` names the agent's steps in place of the agent's own ``name`` (one of them
    is required). ``models`` registers models a run may switch to, and
    ``event_stream_handler`` handles the run's events in steps, as in pydantic-ai's
    other durability capabilities. An unknown option raises ``TypeError``; a bad count
    of retries, :class:`~engine_core.InvalidOptionError`.
    """

    engine_spec = DurabilityEngineSpec(
        engine_name="pikku-mongo",
        durable_unit_noun="step",
        durable_container_noun="workflow",
        codec=JSON_CODEC,
        serialization_failure=_not_serializable,
        wrapped_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        toolset_lifecycles={
            "function": "enter-always",
            "mcp": "enter-in-durable-unit",
            "dynamic": "enter-never",
        },
        unsupported_runtime_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        journal_discovery=True,
        sequential_tools_in_durable_context=False,
        tool_config_key=None,
    )

    def __init__(
        self,
        *,
        model_retries: int = 3,
        tool_retries: int = 0,
        name: str | None = None,
        models: Mapping[str, Model] | None = None,
        event_stream_handler: EventStreamHandler[AgentDepsT] | None = None,
    ) -> None:
        super().__init__(models=models, event_stream_handler=event_stream_handler, name=name)
        self.model_retries = _retries(model_retries, "model_retries")
        self.tool_retries = _retries(tool_retries, "tool_retries")
        self._backend: StepBackend | None = None

    # ---- where the workflow is ----------------------------------------------------

    @property
    def in_durable_context(self) -> bool:
        """Whether the running code is a workflow body's (not a step's)."""
        return current_workflow_context() is not None

    def get_durable_operation_backend(self) -> StepBackend:
        assert self._backend is not None, "bound to an agent first"
        return self._backend

    def _bind_to_agent(self, agent: AbstractAgent[AgentDepsT, Any]) -> None:
        self._backend = StepBackend(
            agent_name=self.name,
            default_model_id=self.default_model_id,
            config=step_options(self.model_retries, self.tool_retries),
        )
        super()._bind_to_agent(agent)

    # ---- the same ids and start time on every replay -------------------------------

    def get_default_run_id(self) -> str | None:
        ctx = current_workflow_context()
        if ctx is None:
            return None
        path = branch_path()
        runs = _RUNS.setdefault(ctx, {})
        n = runs.get(path, 0)
        runs[path] = n + 1
        return f"{ctx.run_id}:agent-{n}" + (f"@{path}" if path else "")

    def get_default_conversation_id(self, run_id: str) -> str | None:
        return conversation_id_from_run_id(run_id) if self.in_durable_context else None

    async def get_run_start_time(self, run_id: str) -> datetime | None:
        ctx = current_workflow_context()
        if ctx is None:
            return None
        # A step, so a replayed run counts its ``timeout=`` from when it first started.
        return await ctx.step(f"{self.name}__run_start_time", _now, clock_of(ctx))

    # ---- the run, its tool calls and its events -----------------------------------

    async def wrap_run(
        self, ctx: RunContext[AgentDepsT], *, handler: WrapRunHandler
    ) -> AgentRunResult[Any]:
        agent = self._agent
        workflow = current_workflow_context()
        if workflow is None or agent is None:
            return await super().wrap_run(ctx, handler=handler)
        # Result events in the order of the calls, not of their ends: the events, and the
        # stream entries and handler steps they make, are the same on every pass.
        # The run's mode is a context variable the method reads (it needs no manager).
        mode = ToolManager.get_parallel_execution_mode(cast(Any, None))
        mode = "parallel_ordered_events" if mode == "parallel" else mode
        events = AgentEvents(workflow, self.name, handler=self._event_stream_handler is not None)
        # pydantic-ai copies the context variables set here into the task that runs the
        # agent, whose tasks inherit them.
        with (
            adopting_tasks(),
            holding_outcomes(OUTCOME_HOLD_S),
            agent_events(events),
            agent.parallel_tool_call_execution_mode(mode),
        ):
            result = await super().wrap_run(ctx, handler=handler)
        await events.end()
        return result

    async def wrap_tool_validate(
        self,
        ctx: RunContext[AgentDepsT],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: RawToolArgs,
        handler: WrapToolValidateHandler,
    ) -> ValidatedToolArgs:
        validated: ValidatedToolArgs = await self._as_call(ctx, call, handler, args)
        return validated

    async def wrap_tool_execute(
        self,
        ctx: RunContext[AgentDepsT],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        return await self._as_call(ctx, call, handler, args)

    async def _as_call(
        self,
        ctx: RunContext[AgentDepsT],
        call: ToolCallPart,
        handler: Callable[[Any], Awaitable[Any]],
        args: Any,
    ) -> Any:
        """``handler(args)``, its units named for ``call`` in a workflow body."""
        if not self.in_durable_context:
            return await handler(args)
        with tool_call_scope(call, ctx.messages):
            return await handler(args)

    async def wrap_run_event_stream(
        self,
        ctx: RunContext[AgentDepsT],
        *,
        stream: AsyncIterable[AgentStreamEvent],
    ) -> AsyncIterator[AgentStreamEvent]:
        inner = super().wrap_run_event_stream(ctx, stream=stream)
        events = run_events() if self.in_durable_context else None
        try:
            async for event in inner:
                if events is not None:
                    await events.event(ctx.run_id, event)
                yield event
        finally:
            await cast(Any, inner).aclose()
