"""A run's own timers: its delayed start (``delay``) and its ``deadline``.

Both are durable (``not_before`` and ``deadline_at`` on the run); this process arms
in-memory timers for those due before its next sweep, and sweeps every
``recovery_interval`` (and at startup) for what is due, wherever the run was started.
Firing twice is harmless: a release is guarded by the run still waiting, and a cancel
by the run not having ended.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from engine_core.common.periodic import Periodic
from engine_core.common.runtime import Runtime
from engine_core.fleet.timers import Timers
from engine_core.records import TERMINAL, RunRecord
from engine_core.run.control import RunControl
from engine_core.store import Store

log = logging.getLogger("engine_core.flow.run_timers")

#: Runs one sweep query reads at most.
SWEEP_BATCH = 1000


def deadline_error(run: RunRecord) -> dict[str, Any]:
    """The error a run cancelled by its deadline carries."""
    when = run.deadline_at.isoformat() if run.deadline_at is not None else "its deadline"
    return {
        "type": "WorkflowDeadlineExceededError",
        "message": f"run {run.run_id!r} passed its deadline ({when}) and was cancelled",
    }


class RunTimers:
    """Releases delayed runs when due and cancels runs past their deadline."""

    def __init__(
        self,
        store: Store,
        runtime: Runtime,
        control: RunControl,
        joined_line: Callable[[str], None],
    ) -> None:
        self.store = store
        self.runtime = runtime
        self.control = control
        self._joined_line = joined_line
        self._timers = Timers(runtime.clock)
        self._loop = Periodic(
            "sweeping delayed runs and deadlines",
            self.sweep,
            every=runtime.config.recovery_interval,
            outages=runtime.outages,
        )

    @property
    def busy(self) -> bool:
        """Whether a sweep runs now or is about to."""
        return self._loop.busy

    def start(self) -> None:
        """Start the loop that fires delays and deadlines due."""
        self._loop.start()

    async def stop(self) -> None:
        """Cancel the armed timers and stop the loop."""
        self._timers.cancel_all()
        await self._loop.stop()

    def arm(self, run: RunRecord) -> None:
        """Arm this process's timers for the run's delay and deadline; each firing
        waits out a store outage, like the host's wake-ups."""
        outages = self.runtime.outages
        if run.not_before is not None:
            release = self.release_due
            if run.debounce_key is not None:
                run_id = run.run_id
                release = lambda: self.release_debounced(run_id)  # noqa: E731
            self._timers.at(
                ("delay", run.run_id),
                run.not_before,
                lambda: self.runtime.spawn(outages.call(release), "release of delayed runs"),
                run_id=run.run_id,
            )
        if run.deadline_at is not None:
            run_id = run.run_id
            self._timers.at(
                ("deadline", run_id),
                run.deadline_at,
                lambda: self.runtime.spawn(
                    outages.call(lambda: self.expire(run_id)), f"deadline of run {run_id}"
                ),
                run_id=run_id,
            )

    def ended(self, run_id: str) -> None:
        """The run ended: its delay and deadline timers are not needed any more."""
        self._timers.cancel_run(run_id)

    def run_ids(self) -> list[str]:
        """The runs this process holds a delay or deadline timer for."""
        return self._timers.run_ids()

    async def sweep(self) -> None:
        """Release what is due, cancel what is past its deadline, and arm timers for
        what falls due before the next sweep."""
        await self.release_due()
        now = self.runtime.clock.now()
        horizon = now + timedelta(seconds=self.runtime.config.recovery_interval)
        for run in await self.store.find_deadlines(horizon, SWEEP_BATCH):
            if run.deadline_at is not None and run.deadline_at <= now:
                await self.expire(run.run_id)
            else:
                self.arm(run)
        for run in await self.store.find_delayed_runs(horizon, SWEEP_BATCH):
            self.arm(run)

    async def release_due(self) -> int:
        """Release every delayed run whose time has come; how many were released."""
        released = 0
        while True:
            # A run is due at its ``not_before`` itself (the find is strict): a virtual
            # clock's alarm rings exactly then, a real one a little after.
            before = self.runtime.clock.now() + timedelta(microseconds=1)
            due = await self.store.find_delayed_runs(before, SWEEP_BATCH)
            if not due:
                return released
            runs = await self.store.release_delayed_runs(due)
            for run in runs:
                if run.queue is not None:
                    self._joined_line(run.queue)
                else:
                    self.runtime.kick(run.run_id)
            released += len(runs)
            if len(due) < SWEEP_BATCH:
                return released

    async def release_debounced(self, run_id: str) -> int:
        """Release what is due; a debounced run that a later start moved on (here or
        elsewhere) gets its timer again, for its new due time."""
        released = await self.release_due()
        run = await self.store.get_run(run_id)
        if run is not None and run.status == "queued" and run.not_before is not None:
            self.arm(run)
        return released

    async def expire(self, run_id: str) -> None:
        """Cancel the run, with its children, if it is past its deadline and not ended."""
        run = await self.store.get_run(run_id)
        if run is None or run.status in TERMINAL or run.deadline_at is None:
            return
        if run.deadline_at > self.runtime.clock.now():
            self.arm(run)  # fired early (a clock step): wait for the rest
            return
        await self.control.cancel(run_id, error=deadline_error(run))
