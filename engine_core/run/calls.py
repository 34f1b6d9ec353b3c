"""Calls on the context: how every call a workflow body makes on the engine is wrapped
(on the context, or on an update the body took)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, Protocol, TypeVar

from engine_core.common.outages import StoreDown
from engine_core.errors import StoreUnavailableError
from engine_core.run.branches import StepNames, mark_call

_T = TypeVar("_T")
_P = ParamSpec("_P")


class _Runner(Protocol):
    @property
    def names(self) -> StepNames: ...


class _OnContext(Protocol):
    """What a checkpointed call is a method of: the context, or an update it took."""

    _pass: _Runner


def checkpointed(
    method: Callable[_P, Coroutine[Any, Any, _T]],
) -> Callable[_P, Coroutine[Any, Any, _T]]:
    """A call on the context (a method of :class:`~engine_core.WorkflowContext`, or of
    an update a body took): the tasks made while it runs are not the body's (see
    ``engine_core.run.branches``), and a store outage met inside it ends the pass (to be
    given again once the store is back) instead of surfacing as the workflow's own
    exception."""

    @functools.wraps(method)
    async def call(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        on: _OnContext = args[0]  # type: ignore[assignment]
        branch = on._pass.names.begin_call()
        try:
            return await method(*args, **kwargs)
        except StoreUnavailableError as exc:
            raise StoreDown() from exc
        finally:
            if branch is not None:
                branch.end_call()

    mark_call(call)
    return call
