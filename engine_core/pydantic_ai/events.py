"""An agent's events, written to its workflow run's stream ``"agent"``.

The events an agent run streams (to an ``event_stream_handler``) are written from the
workflow body, as it sees them, each to the next position of the stream: a replay meets
the same events at the same positions and writes nothing new, so each is written once
whatever crashed in between. An entry is ``{"agent": name, "agent_run_id": id, "event":
...}``, the event in pydantic-ai's JSON form
(``TypeAdapter(AgentStreamEvent).validate_python(entry.value["event"])`` gives it back).
"""

from __future__ import annotations

import logging
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
