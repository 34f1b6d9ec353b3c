"""What a running step sees of itself: :func:`current_step` and its :class:`StepInfo`."""

from __future__ import annotations

from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine_core.tracing import enter_step_log, leave_step_log

__all__ = ["StepHooks", "StepInfo", "current_step", "enter_step", "leave_step"]


class StepHooks(Protocol):
    """What a step attempt writes streams and heartbeats with (``engine_core.run.streams``)."""

    async def write_stream(self, info: StepInfo, key: str, value: Any) -> None: ...

    async def heartbeat(self, info: StepInfo, details: Any) -> None: ...


@dataclass(frozen=True)
class StepInfo:
    """The step attempt the current code runs in. ``last_heartbeat``: the details the
    last heartbeat of an earlier attempt of this step left (None when none did)."""

    run_id: str
    step: str
    attempt: int
    idempotency_key: str
    last_heartbeat: Any = field(default=None, compare=False)

    async def write_stream(self, key: str, value: Any) -> None:
        """Append ``value`` to the run's stream ``key``, tagged with this attempt and a
        count from 0 (``entry.attempt``, ``entry.n``): readers can drop the entries of an
        attempt that a later one superseded. Raises ``StreamTooLargeError`` past the
        stream's limit (``engine_core.streams``)."""
        await self._hooks().write_stream(self, key, value)

    async def heartbeat(self, details: Any = None) -> None:
        """Keep ``details`` for the next attempt (its ``last_heartbeat``) and, in a
        dispatched step, renew this worker's claim on the step."""
        await self._hooks().heartbeat(self, details)

    def _hooks(self) -> StepHooks:
        hooks = _current_hooks.get()
        if hooks is None or _current_step.get() is not self:
            raise RuntimeError(
                "streams and heartbeats work only inside the step attempt the engine runs"
            )
        return hooks


_current_step: ContextVar[StepInfo | None] = ContextVar("engine_core_current_step", default=None)
# What the current attempt writes streams and heartbeats with (not in StepInfo, which a
# step may hand on as a plain value).
_current_hooks: ContextVar[StepHooks | None] = ContextVar("engine_core_step_hooks", default=None)


def current_step() -> StepInfo | None:
    """Inside a step: its run id, step name, attempt (1-based) and idempotency key."""
    return _current_step.get()


_Tokens = tuple[Token[StepInfo | None], Token[StepHooks | None], Token[tuple[str, str] | None]]


def enter_step(info: StepInfo, hooks: StepHooks | None = None) -> _Tokens:
    """Make ``info`` the current step, writing with ``hooks``, its name on the log
    records of its code (until :func:`leave_step` with the tokens)."""
    log = enter_step_log(info.run_id, info.step)
    return _current_step.set(info), _current_hooks.set(hooks), log


def leave_step(tokens: _Tokens) -> None:
    """Undo :func:`enter_step` with the tokens it returned."""
    leave_step_log(tokens[2])
    _current_hooks.reset(tokens[1])
    _current_step.reset(tokens[0])
