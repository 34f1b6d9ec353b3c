"""What a workflow body and a running step can see of the engine."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine_core.durations import Duration

if TYPE_CHECKING:
    from engine_core.run_pass import RunPass


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


class WorkflowContext:
    """Handed to a workflow body; every call on it is checkpointed."""

    def __init__(self, run_pass: RunPass) -> None:
        self._pass = run_pass

    @property
    def run_id(self) -> str:
        return self._pass.run.run_id

    @property
    def workflow(self) -> str:
        return self._pass.run.workflow

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

    async def sleep(self, name: str, duration: Duration) -> None:
        """Wait ``duration`` durably: the wake-up time survives restarts."""
        await self._pass.sleep_step(name, duration)

    async def wait_for_event(self, name: str, *, timeout: Duration | None = None) -> Any:
        """The payload of the oldest unconsumed event ``name``; None on timeout."""
        return await self._pass.event_step(name, timeout)

    async def child(self, name: str, workflow: str, input: Any = None) -> Any:
        """Run ``workflow`` as a child run and return its output."""
        return await self._pass.child_step(name, workflow, input)
