"""The actions the dashboard offers on a run or a schedule, and the Engine call behind
each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from engine_core import Engine
from engine_core.records import RunState


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
            "and records its outcome; children that have not ended are cancelled too. "
            "A queued run leaves its queue without starting.",
            frozenset({"queued", "running", "suspended"}),
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
            "send-event",
            "Send event",
            "Deliver the event, with this payload, to the run waiting for it; the run "
            "takes it at its next pass.",
            frozenset({"running", "suspended"}),
            "Event sent.",
        ),
        Action(
            "retry",
            "Retry",
            "Give the failed run a new pass from the step that failed it: that step gets "
            "one more attempt, the steps that succeeded keep their results.",
            frozenset({"failed"}),
            "Retry requested.",
        ),
        Action(
            "fork",
            "Fork",
            "Start a new run of the same workflow, queue and version that reuses the "
            "steps this run finished before the chosen step (by default the step that "
            "failed it, else its first step) and runs that step and every later one anew. "
            "This run is not changed. Steps that run again get new idempotency keys.",
            frozenset(get_args(RunState)),
            "This run is a fork, just made.",
        ),
    )
}


def actions_for(status: str) -> list[Action]:
    """The actions that apply to a run in ``status``."""
    return [a for a in ACTIONS.values() if status in a.applies_to and a.name != "send-event"]


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
    elif action.name == "fork":
        await engine.fork(run_id)
    else:  # pragma: no cover - ACTIONS and this switch are kept in step
        raise ValueError(f"unknown action {action.name!r}")


@dataclass(frozen=True)
class ScheduleAction:
    """One action on a schedule: its form value, its button label, what it does,
    whether it applies to a paused schedule, to one that is not, and what the schedules
    page says once it is done."""

    name: str
    label: str
    explain: str
    on_paused: bool
    on_active: bool
    done: str
    danger: bool = False

    def applies(self, paused: bool) -> bool:
        """Whether the action applies to a schedule that is (or is not) paused."""
        return self.on_paused if paused else self.on_active


SCHEDULE_ACTIONS: dict[str, ScheduleAction] = {
    action.name: action
    for action in (
        ScheduleAction(
            "pause",
            "Pause",
            "Stop the schedule firing until it is resumed. Runs it started already go on.",
            on_paused=False,
            on_active=True,
            done="paused",
        ),
        ScheduleAction(
            "trigger",
            "Run now",
            "Start one run of the schedule's workflow now, with its input, paused or not. "
            "Its regular fires are not changed.",
            on_paused=True,
            on_active=True,
            done="triggered",
        ),
        ScheduleAction(
            "resume",
            "Resume",
            "Let the schedule fire again, from its next fire after now: the fires it "
            "missed while paused are not made up.",
            on_paused=True,
            on_active=False,
            done="resumed",
        ),
        ScheduleAction(
            "delete",
            "Delete",
            "Delete the schedule for good. The runs it started are not touched.",
            on_paused=True,
            on_active=True,
            done="deleted",
            danger=True,
        ),
    )
}


def schedule_actions_for(paused: bool) -> list[ScheduleAction]:
    """The actions that apply to a schedule that is (or is not) paused."""
    return [action for action in SCHEDULE_ACTIONS.values() if action.applies(paused)]


async def perform_on_schedule(engine: Engine, action: ScheduleAction, name: str) -> None:
    """Carry ``action`` out on the schedule ``name``, through the Engine API."""
    if action.name == "pause":
        await engine.pause_schedule(name)
    elif action.name == "resume":
        await engine.resume_schedule(name)
    elif action.name == "delete":
        await engine.delete_schedule(name)
    elif action.name == "trigger":
        await engine.trigger_schedule(name)
    else:  # pragma: no cover - SCHEDULE_ACTIONS and this switch are kept in step
        raise ValueError(f"unknown schedule action {action.name!r}")
