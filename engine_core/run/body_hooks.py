"""What code that wraps a workflow body's code (an integration, such as
``engine_core.pydantic_ai``) finds of the body: its context, from whichever of its tasks
the code runs in, and a hold on the write of the outcomes of its steps."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

from engine_core.run.step_info import current_step

if TYPE_CHECKING:
    from engine_core.run.context import WorkflowContext

#: The context of the workflow body the running code belongs to (set around the body;
#: the tasks the body creates inherit it).
_BODY: ContextVar[WorkflowContext | None] = ContextVar("engine_core_body", default=None)


def current_workflow_context() -> WorkflowContext | None:
    """The :class:`WorkflowContext` of the workflow body the running code is part of (in
    the body's own task or one it created); None elsewhere, and inside a step, whose code
    runs once instead of on every replay. For integrations that make the calls on the
    context for the code they wrap (``engine_core.pydantic_ai``)."""
    ctx = _BODY.get()
    if ctx is None or current_step() is not None:
        return None
    return ctx


@contextmanager
def running_body(ctx: WorkflowContext) -> Iterator[None]:
    """Around a pass's (or a dry replay's) run of the body that ``ctx`` is handed to."""
    token = _BODY.set(ctx)
    try:
        yield
    finally:
        _BODY.reset(token)


#: How long a finished step's outcome may wait for the next step's write to carry it
#: before it is written on its own (0: until the body yields; see ``run.pass_state``).
OUTCOME_HOLD: ContextVar[float] = ContextVar("engine_core_outcome_hold", default=0.0)


@contextmanager
def holding_outcomes(seconds: float) -> Iterator[None]:
    """Around code that yields to the loop between its steps while it computes, waiting
    for nothing outside (a library driving tasks of its own, as pydantic-ai does between
    an agent's model requests and tool calls): a step's outcome waits up to ``seconds``
    for the next step's write to carry it, instead of a write of its own at the first
    yield. (The outcome is durable a little later; a crash meanwhile loses the attempt,
    as one in the moment before any step's next write does.)"""
    token = OUTCOME_HOLD.set(seconds)
    try:
        yield
    finally:
        OUTCOME_HOLD.reset(token)
