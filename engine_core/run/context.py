"""What a workflow body and a running step can see of the engine."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any, ParamSpec, Protocol, TypeVar

from engine_core.durations import Duration
from engine_core.errors import StoreUnavailableError
from engine_core.outages import StoreDown
from engine_core.values import check_name


@dataclass(frozen=True)
class StepInfo:
    """The step attempt the current code runs in."""

    run_id: str
    step: str
    attempt: int
    idempotency_key: str


_current_step: ContextVar[StepInfo | None] = ContextVar("engine_core_current_step", default=None)


def current_step() -> StepInfo | None:
    """Inside a step: its run id, step name, attempt (1-based) and idempotency key."""
    return _current_step.get()


def enter_step(info: StepInfo) -> Token[StepInfo | None]:
    """Make ``info`` the current step (until :func:`leave_step` with the token)."""
    return _current_step.set(info)


def leave_step(token: Token[StepInfo | None]) -> None:
    _current_step.reset(token)


class StepRunner(Protocol):
    """What a :class:`WorkflowContext` hands its calls to: the pass replaying the body."""

    @property
    def run_id(self) -> str: ...

    @property
    def workflow(self) -> str: ...

    async def inline_step(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        *,
        retries: int,
        retry_delay: Duration,
        compensate: Callable[[Any], Any] | None,
        timeout: Duration | None,
    ) -> Any: ...

    async def dispatch_step(
        self,
        name: str,
        function: str,
        payload: Any,
        *,
        retries: int,
        retry_delay: Duration,
        timeout: Duration | None,
    ) -> Any: ...

    async def sleep_step(self, name: str, duration: Duration) -> None: ...

    async def event_step(self, name: str, timeout: Duration | None) -> Any: ...

    async def child_step(self, name: str, workflow: str, input: Any) -> Any: ...

    async def patched(self, patch_id: str) -> bool: ...


_T = TypeVar("_T")
_P = ParamSpec("_P")


def _outage_ends_the_pass(
    method: Callable[_P, Coroutine[Any, Any, _T]],
) -> Callable[_P, Coroutine[Any, Any, _T]]:
    """A store outage met inside a checkpointed call ends the pass (to be given again
    once the store is back) instead of surfacing as the workflow's own exception."""

    @functools.wraps(method)
    async def call(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return await method(*args, **kwargs)
        except StoreUnavailableError as exc:
            raise StoreDown() from exc

    return call


class WorkflowContext:
    """Handed to a workflow body; every call on it is checkpointed."""

    def __init__(self, runner: StepRunner) -> None:
        self._pass = runner

    @property
    def run_id(self) -> str:
        """The id of the run this body belongs to."""
        return self._pass.run_id

    @property
    def workflow(self) -> str:
        """The name of the workflow being run."""
        return self._pass.workflow

    @_outage_ends_the_pass
    async def step(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        retries: int = 0,
        retry_delay: Duration = 0,
        compensate: Callable[[Any], Any] | None = None,
        timeout: Duration | None = None,
    ) -> Any:
        """Run ``fn(*args)`` here, once: a replay returns the recorded result."""
        return await self._pass.inline_step(
            name,
            fn,
            args,
            retries=retries,
            retry_delay=retry_delay,
            compensate=compensate,
            timeout=timeout,
        )

    @_outage_ends_the_pass
    async def dispatch(
        self,
        name: str,
        function: str,
        payload: Any = None,
        *,
        retries: int = 0,
        retry_delay: Duration = 0,
        timeout: Duration | None = None,
    ) -> Any:
        """Hand step ``name`` to any worker that registered ``function``; wait for it."""
        return await self._pass.dispatch_step(
            name, function, payload, retries=retries, retry_delay=retry_delay, timeout=timeout
        )

    @_outage_ends_the_pass
    async def sleep(self, name: str, duration: Duration) -> None:
        """Wait ``duration`` durably: the wake-up time survives restarts."""
        await self._pass.sleep_step(name, duration)

    @_outage_ends_the_pass
    async def wait_for_event(self, name: str, *, timeout: Duration | None = None) -> Any:
        """The payload of the oldest unconsumed event ``name``; None on timeout."""
        return await self._pass.event_step(name, timeout)

    @_outage_ends_the_pass
    async def child(self, name: str, workflow: str, input: Any = None) -> Any:
        """Run ``workflow`` as a child run and return its output."""
        return await self._pass.child_step(name, workflow, input)

    @_outage_ends_the_pass
    async def patched(self, patch_id: str) -> bool:
        """True on a run that reaches this point on new code (a marker, riding the next
        write, keeps it True on every replay); False on a run whose records show it
        passed this point on old code. See DESIGN 3d."""
        return await self._pass.patched(patch_id)

    def deprecate_patch(self, patch_id: str) -> None:
        """Once no run from before patch ``patch_id`` remains: records nothing and
        accepts runs with or without its marker."""
        check_name(patch_id, "patch id")
