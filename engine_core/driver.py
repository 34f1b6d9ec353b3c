"""Driving a run: take its lease, give it passes while it is owed them, let go.

One pass at a time per run: a pass holds the run's lease. A trigger that comes while a
pass runs finds the lease taken and leaves the pass owed (``pending_pass``); the holder
looks for it once the lease is free, so no trigger is lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from engine_core.control import RunControl
from engine_core.leases import holding
from engine_core.records import ACTIVE
from engine_core.run_pass import PassEnd, RunPass
from engine_core.runtime import Runtime
from engine_core.store import Store


class Driver:
    """Runs passes of runs in this process, at most one drive per run at a time."""

    def __init__(self, store: Store, runtime: Runtime, control: RunControl) -> None:
        self.store = store
        self.runtime = runtime
        self.control = control
        self._driving: set[str] = set()
        # Passes in flight, bounded too: hundreds of passes started at once would each
        # take a lease whose clock runs while they queue for the store.
        self._pass_slots = asyncio.Semaphore(runtime.config.concurrency)

    def spawn(self, run_id: str, on_taken: Callable[[], None] | None = None) -> bool:
        """Drive the run in the background unless this process already drives it;
        ``on_taken`` is called when another process holds it."""
        if run_id in self._driving:
            return False
        self._driving.add(run_id)  # at once, so a second kick before the task runs is a no-op

        async def go() -> None:
            try:
                if not await self._drive(run_id) and on_taken is not None:
                    on_taken()
            finally:
                self._driving.discard(run_id)

        self.runtime.spawn(go(), f"pass of run {run_id}")
        return True

    async def drive(self, run_id: str) -> bool:
        """Give the run passes here now; False if another process holds it (True when
        this process drives it already)."""
        if run_id in self._driving:
            return True
        self._driving.add(run_id)
        try:
            return await self._drive(run_id)
        finally:
            self._driving.discard(run_id)

    async def _drive(self, run_id: str) -> bool:
        async with self._pass_slots:
            while True:
                end = await self._one_pass(run_id)
                if end is None:
                    return False
                if end == "requeued":
                    # This process is shutting down: the run is owed to the fleet.
                    await self.store.request_pass(run_id)
                    return True
                if end not in ("parked", "stopped"):
                    return True
                # A trigger that came while we held the lease found it taken and left
                # the pass owed to us; it is only visible now that the lease is free.
                again = await self.store.get_run(run_id)
                if again is None or not again.pending_pass or again.status not in ACTIVE:
                    return True

    async def _one_pass(self, run_id: str) -> PassEnd | None:
        """One pass under the run's lease; None if another process holds the lease."""
        config = self.runtime.config
        async with holding(
            self.store, f"run:{run_id}", self.runtime.instance_id, config.lease_ttl
        ) as held:
            if held is None:
                return None
            run = await self.store.begin_pass(run_id)
            if run is None or run.status not in ACTIVE:
                return "terminal"
            if self.runtime.workflow_fn(run.workflow) is None:
                # Not ours to run: leave the pass owed for an engine that has it.
                await self.store.request_pass(run_id)
                return "terminal"
            steps = await self.store.load_steps(run_id) if run.passes > 1 else []
            run_pass = RunPass(self.store, self.runtime, self.control, run, held.lease, steps)
            return await run_pass.execute()
