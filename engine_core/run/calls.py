"""Calls on the context: what every call a workflow body makes on the engine shares
(how a checkpointed call is wrapped, and how a recorded value reaches the body)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, Protocol, TypeVar

from engine_core.common.convert import from_json
from engine_core.common.outages import StoreDown
from engine_core.errors import StoreUnavailableError
from engine_core.run.branches import StepNames, mark_call

_T = TypeVar("_T")
_P = ParamSpec("_P")


class ValueMismatch(BaseException):
    """A recorded value does not fit the type the code now declares for it: the run is
    suspended with the error, as a divergence is (a ``BaseException``: a workflow body's
    ``except Exception`` must not take it for its own failure)."""

    def __init__(self, what: str, declared: Any, exc: BaseException) -> None:
        name = getattr(declared, "__name__", str(declared))
        super().__init__(f"{what} does not fit the type the code declares ({name}): {exc}")


def as_declared(value: Any, declared: Any, what: str) -> Any:
    """``value`` as recorded, given as the ``declared`` type (:class:`ValueMismatch`)."""
    try:
        return from_json(value, declared)
    except (ValueError, TypeError) as exc:
        raise ValueMismatch(what, declared, exc) from exc


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
