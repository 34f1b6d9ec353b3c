"""The actions the dashboard offers on a run, and the Engine call behind each."""

from __future__ import annotations

from dataclasses import dataclass

from engine_core import Engine


@dataclass(frozen=True)
class Action:
    """One action: its form value, its button label, what it does, the run statuses it
    applies to, and what the run page says once it is done."""

    name: str
    label: str
    explain: str
    applies_to: frozenset[str]
    done: str
    danger: bool = False


ACTIONS: dict[str, Action] = {
    action.name: action
    for action in (
        Action(
            "cancel",
            "Cancel",
            "Stop the run for good, without compensating. A step running now finishes "
            "and records its outcome; children that have not ended are cancelled too.",
            frozenset({"running", "suspended"}),
            "Cancel requested.",
            danger=True,
        ),
        Action(
            "cancel-compensate",
            "Cancel and compensate",
            "Stop the run and run the compensations of its finished steps, newest first. "
            "It ends compensated, or compensation_failed (cancelled when there is nothing "
            "to compensate); its children are cancelled the same way.",
            frozenset({"running", "suspended"}),
            "Cancel with compensation requested.",
            danger=True,
        ),
        Action(
            "suspend",
            "Suspend",
            "Pause the run: no new step of it starts until it is resumed. A step running "
            "now finishes and records its outcome.",
            frozenset({"running"}),
            "Suspended.",
        ),
        Action(
            "resume",
            "Resume",
            "Set the suspended run running again and give it a pass.",
            frozenset({"suspended"}),
            "Resumed.",
        ),
        Action(
            "retry",
            "Retry",
            "Give the failed run a new pass from the step that failed it: that step gets "
            "one more attempt, the steps that succeeded keep their results.",
            frozenset({"failed"}),
            "Retry requested.",
        ),
    )
}


def actions_for(status: str) -> list[Action]:
    """The actions that apply to a run in ``status``."""
    return [action for action in ACTIONS.values() if status in action.applies_to]


async def perform(engine: Engine, action: Action, run_id: str) -> None:
    """Carry ``action`` out on the run, through the Engine API."""
    if action.name == "cancel":
        await engine.cancel(run_id)
    elif action.name == "cancel-compensate":
        await engine.cancel(run_id, compensate=True)
    elif action.name == "suspend":
        await engine.suspend(run_id)
    elif action.name == "resume":
        await engine.resume(run_id)
    elif action.name == "retry":
        await engine.retry(run_id)
    else:  # pragma: no cover - ACTIONS and this switch are kept in step
        raise ValueError(f"unknown action {action.name!r}")
