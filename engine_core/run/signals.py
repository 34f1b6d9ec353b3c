"""How a pass ends early: the control signals it raises through the workflow body, and
the error a step that failed for good raises there."""

from __future__ import annotations

from engine_core.common.outages import StoreDown
from engine_core.errors import StepFailedError
from engine_core.records import StepRecord
from engine_core.run.divergence import Diverged


class Parked(BaseException):
    """The step is armed and waits for something outside this pass."""


class Stopped(BaseException):
    """The run was stopped, or a newer pass owns it: this pass must write nothing more."""


class ReplayEnd(BaseException):
    """A compensating replay reached a step that never finished."""


#: The control signals a pass raises through the body, strongest first.
SIGNALS: tuple[type[BaseException], ...] = (StoreDown, Diverged, Parked, Stopped, ReplayEnd)


def stored_failure(step: StepRecord) -> StepFailedError:
    """The error a failed step raises in the body, as its record tells it."""
    error = step.error or {}
    return StepFailedError(
        step.key,
        step.attempts,
        str(error.get("type", "Error")),
        str(error.get("message", "")),
    )
