"""The run mirror: an optional sink told of every run and step transition.

The engine writes to it only after a transition has landed in the store, so the mirror
is never a source of truth. A failing mirror is logged and never fails a run.
"""

from __future__ import annotations

import logging
from typing import Protocol, runtime_checkable

from engine_core.records import RunRecord, StepRecord

log = logging.getLogger("engine_core.mirror")


@runtime_checkable
class RunMirror(Protocol):
    """Receives copies of runs and steps as they change (a search index, a dashboard)."""

    async def run_changed(self, run: RunRecord) -> None:
        """The run moved to ``run.status`` (or was created)."""

    async def step_changed(self, step: StepRecord) -> None:
        """The step's latest state, after an attempt started, ended or was armed."""


async def mirror_run(mirror: RunMirror | None, run: RunRecord) -> None:
    """Tell ``mirror`` (if any) of ``run``; a mirror that fails is logged, never the run's
    failure."""
    if mirror is None:
        return
    try:
        await mirror.run_changed(run)
    except Exception as exc:  # a mirror must never fail the run
        log.warning("run mirror failed for run %s: %s", run.run_id, exc)


async def mirror_step(mirror: RunMirror | None, step: StepRecord) -> None:
    """Tell ``mirror`` (if any) of ``step``; a mirror that fails is logged, never the run's
    failure."""
    if mirror is None:
        return
    try:
        await mirror.step_changed(step)
    except Exception as exc:
        log.warning("run mirror failed for step %r of run %s: %s", step.key, step.run_id, exc)
