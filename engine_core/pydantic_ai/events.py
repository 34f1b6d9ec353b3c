"""An agent's events, written to its workflow run's stream ``"agent"``.

The events an agent's run streams to an ``event_stream_handler`` are written from the
workflow body, as it sees them, each to the next position of the stream: a replay meets
the same events at the same positions and writes nothing new, so each is written once
whatever crashed in between. An entry is ``{"agent": name, "agent_run_id": id, "event":
...}``, the event in pydantic-ai's JSON form
(``TypeAdapter(AgentStreamEvent).validate_python(entry.value["event"])`` gives it back).

Whether a run streams to a handler shows in its model requests: pydantic-ai streams
them when, and only when, the run's events go to a handler (given to the capability,
to the agent or to ``agent.run``). Without one, pydantic-ai still streams its tool
calls' events through the capability, and they are not written. So a run's events are
written once its first model request streams (or from the start, with the capability's
handler); the events before that request (a run resumed with the results of deferred
tool calls runs those first) wait for it, and are written then, or dropped if it does
not stream (or written at the run's end if no request came).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
from weakref import WeakSet

from pydantic import TypeAdapter
from pydantic_ai.messages import AgentStreamEvent

from engine_core.errors import StreamTooLargeError
from engine_core.run.context import WorkflowContext

STREAM = "agent"

log = logging.getLogger("engine_core")

_EVENT: TypeAdapter[Any] = TypeAdapter(AgentStreamEvent)
#: The passes whose stream ``"agent"`` is full: they write no more events to it.
_FULL: WeakSet[WorkflowContext] = WeakSet()


class AgentEvents:
    """The events of one agent's run in a workflow body, on their way to the stream."""

    def __init__(self, ctx: WorkflowContext, agent: str, *, handler: bool) -> None:
        self._ctx = ctx
        self._agent = agent
        #: Whether the run streams its events (None: not known before a model request).
        self._streams: bool | None = True if handler else None
        self._waiting: list[tuple[str | None, AgentStreamEvent]] = []

    async def event(self, agent_run_id: str | None, event: AgentStreamEvent) -> None:
        if self._streams:
            await write_event(self._ctx, self._agent, agent_run_id, event)
        elif self._streams is None:
            self._waiting.append((agent_run_id, event))

    async def model_request(self, streaming: bool) -> None:
        """A model request of the run starts: it streams or not, and so does the run."""
        if self._streams is None:
            self._streams = streaming
            await self._release(write=streaming)

    async def end(self) -> None:
        """The run ended: events still waiting are written (no request told)."""
        await self._release(write=True)

    async def _release(self, *, write: bool) -> None:
        waiting, self._waiting = self._waiting, []
        for agent_run_id, event in waiting if write else ():
            await write_event(self._ctx, self._agent, agent_run_id, event)


#: The events of the agent's run the running code belongs to.
_RUN: ContextVar[AgentEvents | None] = ContextVar("engine_core_agent_events", default=None)


@contextmanager
def agent_events(events: AgentEvents) -> Iterator[None]:
    """Around an agent's run (its tasks inherit it)."""
    token = _RUN.set(events)
    try:
        yield
    finally:
        _RUN.reset(token)


def run_events() -> AgentEvents | None:
    """The events of the agent's run the running code belongs to, if any."""
    return _RUN.get()


async def write_event(
    ctx: WorkflowContext, agent: str, agent_run_id: str | None, event: AgentStreamEvent
) -> None:
    """Write ``event`` to the run's stream ``"agent"``. An event too large for an entry
    is written as a stand-in naming its kind; once the stream holds as many entries as
    it may, the run's later events are not written (a warning says so, once a pass)."""
    if ctx in _FULL:
        return
    entry: dict[str, Any] = {"agent": agent, "agent_run_id": agent_run_id}
    try:
        await ctx.write_stream(STREAM, {**entry, "event": _EVENT.dump_python(event, mode="json")})
        return
    except StreamTooLargeError:
        pass
    kind = getattr(event, "event_kind", type(event).__name__)
    try:
        await ctx.write_stream(STREAM, {**entry, "event": {"event_kind": kind}, "omitted": True})
    except StreamTooLargeError as exc:
        _FULL.add(ctx)
        log.warning(
            "run %s: agent %r: no more events are written to stream %r: %s",
            ctx.run_id,
            agent,
            STREAM,
            exc,
        )
