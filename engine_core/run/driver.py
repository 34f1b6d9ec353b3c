"""Driving a run: take its lease, give it passes while it is owed them, let go.

One pass at a time per run: a pass holds the run's lease, which lives on the run
itself (taking it is the write that begins the pass). A trigger that comes while a pass
runs leaves the pass owed (``pending_pass``, or a local note when it comes from this
process); the pass cannot park over it, and the holder runs another.
"""

from __future__ import annotations

import asyncio
import functools
from collections import OrderedDict
from collections.abc import Callable

import engine_core.common.lifecycle_log as lifecycle_log
import engine_core.metrics as metrics
from engine_core.common.runtime import Runtime
from engine_core.errors import StoreUnavailableError
from engine_core.records import ACTIVE, RunRecord, StepRecord
from engine_core.run.control import RunControl
from engine_core.run.leases import KeepAlive
from engine_core.run.run_pass import PassEnd, RunPass
from engine_core.store import Store

#: How many parked runs' steps a driver remembers.
REMEMBERED_RUNS = 1024


class Driver:
    """Runs passes of runs in this process, at most one drive per run at a time."""

    def __init__(self, store: Store, runtime: Runtime, control: RunControl) -> None:
        self.store = store
        self.runtime = runtime
        self.control = control
        self._driving: set[str] = set()
        # Runs this process kicked while it drove them: each gets one more pass.
        self._again: set[str] = set()
        # Runs whose lease was handed to this process (admitted here) while a drive of
        # the same run was ending: that drive takes the pass over, or a new one does.
        self._handed: dict[str, RunRecord] = {}
        # Passes in flight, bounded too: hundreds of passes started at once would each
        # take a lease whose clock runs while they queue for the store.
        self._pass_slots = asyncio.Semaphore(runtime.config.concurrency)
        self._queued = 0
        # The steps of runs whose last pass ran here and parked, by token: the next pass
        # here reads again only what changed since (``RunRecord.changed``), so a run of N
        # parks (dispatches, waits) reads O(N) step records in all, not O(N**2).
        self._remembered: OrderedDict[str, tuple[int, list[StepRecord]]] = OrderedDict()
        # Per run: the token of a pass an outage ended, and the outcomes it had recorded
        # but not written. The next pass this process begins holding that lease (the
        # token after it) carries them: without them it would take those steps back as
        # lost attempts, and an outage would cost attempts (or fail the run).
        self._unwritten: dict[str, tuple[int, list[StepRecord]]] = {}

    def driving(self, run_id: str) -> bool:
        """Whether this process drives the run now."""
        return run_id in self._driving

    @property
    def busy(self) -> bool:
        """Whether this process drives a run now (or is about to)."""
        return bool(self._driving)

    @property
    def backlog(self) -> int:
        """Drives in this process that are running or waiting for a pass slot."""
        return self._queued

    def spawn(
        self,
        run_id: str,
        on_taken: Callable[[], None] | None = None,
        *,
        adopted: RunRecord | None = None,
    ) -> bool:
        """Drive the run in the background unless this process already drives it (then
        its drive runs one more pass); ``on_taken`` is called when another process
        holds it. ``adopted``: the run as inserted holding this process's lease, whose
        first pass needs no begin."""
        if run_id in self._driving:
            if adopted is not None:
                # Its lease is ours already (token moved on): the pass must not be lost
                # with the kick, or the run would wait for the lease to lapse.
                self._handed[run_id] = adopted
            self._again.add(run_id)
            return False
        self._driving.add(run_id)  # at once, so a second kick before the task runs is a no-op

        async def go() -> None:
            try:
                if not await self._drive(run_id, adopted) and on_taken is not None:
                    on_taken()
            finally:
                self._let_go(run_id)

        self.runtime.spawn(go(), f"pass of run {run_id}")
        return True

    def _let_go(self, run_id: str) -> None:
        self._driving.discard(run_id)
        self._again.discard(run_id)
        handed = self._handed.pop(run_id, None)
        if handed is not None:  # the drive ended (broken or cancelled) before taking it
            self.spawn(run_id, adopted=handed)

    async def drive(self, run_id: str) -> bool:
        """Give the run passes here now; False if another process holds it (True when
        this process drives it already)."""
        if run_id in self._driving:
            self._again.add(run_id)
            return True
        self._driving.add(run_id)
        try:
            return await self._drive(run_id, None)
        finally:
            self._let_go(run_id)

    async def _drive(self, run_id: str, adopted: RunRecord | None) -> bool:
        config = self.runtime.config
        self._queued += 1
        try:
            async with self._pass_slots:
                run = adopted or await self.runtime.outages.call(
                    lambda: self.store.begin_pass(
                        run_id,
                        holder=self.runtime.instance_id,
                        ttl=config.lease_ttl,
                        workflows=self.runtime.workflow_names(),
                    )
                )
                if run is None:
                    return False
                first = run
                if run.passes == 1:
                    since = run.not_before or run.created_at
                    metrics.first_pass(run.workflow, run.queue, since, self.runtime.clock.now)
                if not self.runtime.take_queue_slot(first):
                    # Its queue's runs fill this process's share: the fleet may take it.
                    await self.store.request_pass(run_id)
                    await self.store.release_pass(run_id, token=run.token)
                    return True
                try:
                    while run is not None:
                        self._again.discard(run_id)
                        try:
                            end = await self._pass(run)
                        except StoreUnavailableError:
                            # Met outside the body (reading the steps, letting go): the
                            # same as an outage inside it; go on once the store is back.
                            end = "unavailable"
                        run = await self.runtime.outages.call(
                            functools.partial(self._next, run, end)
                        ) or self._handed.pop(run_id, None)
                finally:
                    self.runtime.give_queue_slot(first)
                return True
        finally:
            self._queued -= 1

    async def _next(self, run: RunRecord, end: PassEnd) -> RunRecord | None:
        """After a pass: the run as the next pass begins it, or None when it is done."""
        run_id = run.run_id
        holder, ttl = self.runtime.instance_id, self.runtime.config.lease_ttl
        if end == "terminal":
            if run_id not in self._again or run_id in self._handed:
                return None  # (a run handed here is begun already)
            # Kicked here as it ended: a retry may have made it live again, owed a pass.
            return await self.store.begin_pass(
                run_id, holder=holder, ttl=ttl, workflows=self.runtime.workflow_names()
            )
        if end == "requeued":
            # This process is shutting down: the run is owed to the fleet.
            await self.store.request_pass(run_id)
            return None
        if end == "unavailable":
            # The store went away mid-pass: once it answers again, go on if the run is
            # still ours (a pass that did not settle still holds the lease).
            latest = await self.store.get_run(run_id)
            if latest is None or latest.token != run.token or latest.status not in ACTIVE:
                self._unwritten.pop(run_id, None)
                return None
            return await self.store.begin_pass(run_id, holder=holder, ttl=ttl, held=run.token)
        if end == "parked":
            if run_id not in self._again:
                return None
            # Kicked here while parking: the lease is free again, but ours to retake.
            return await self.store.begin_pass(run_id, holder=holder, ttl=ttl, held=run.token)
        # Stopped: fenced out, or the park found a pass owed. Still ours only if the
        # token did not move on.
        latest = await self.store.get_run(run_id)
        if latest is None or latest.token != run.token:
            return None
        if latest.status in ACTIVE and (latest.pending_pass or run_id in self._again):
            return await self.store.begin_pass(run_id, holder=holder, ttl=ttl, held=run.token)
        await self.store.release_pass(run_id, token=run.token)
        return None

    async def _pass(self, run: RunRecord) -> PassEnd:
        """One pass of a run whose lease this process holds (``run`` as begun)."""
        run_id, token = run.run_id, run.token
        if run.status not in ACTIVE:
            await self.store.release_pass(run_id, token=token)
            return "terminal"
        if self.runtime.workflow_fn(run.workflow) is None or not self.runtime.drives_version(run):
            # Not ours to run (or, with ``pin_versions``, another version's): leave the
            # pass owed for an engine that has it.
            await self.store.request_pass(run_id)
            await self.store.release_pass(run_id, token=token)
            return "terminal"
        steps = await self._steps_of(run)
        carried = self._unwritten.pop(run_id, None)
        unwritten = carried[1] if carried is not None and carried[0] + 1 == token else []
        ttl = self.runtime.config.lease_ttl

        async def renew() -> bool:
            return await self.store.extend_pass(run_id, token=token, ttl=ttl)

        try:
            extra = lifecycle_log.run_fields(run)
            async with KeepAlive(renew, ttl, f"the lease of run {run_id!r}", extra):
                run_pass = RunPass(self.store, self.runtime, self.control, run, steps, unwritten)
                end = await run_pass.execute()
            if run_pass.again:  # ``always_replay``: the next pass replays the body
                self._again.add(run_id)
            if end == "unavailable":
                self._unwritten[run_id] = (token, run_pass.unwritten())
            if end == "parked":
                self._remember(run_id, token, list(run_pass.steps.values()))
                self.runtime.keep_timers(run_id, run_pass.armed)
            elif end in ("stopped", "unavailable") and run_pass.handed:
                # Fenced out (or cut off) after a job run here handed this pass its
                # outcome instead of telling the run: tell it now, or a newer pass that
                # parked on that job would wait for ever.
                for key in run_pass.handed:
                    await self.runtime.outages.call(
                        functools.partial(self.store.request_pass, run_id, changed=key)
                    )
            return end
        except BaseException:
            # Cancelled (a shutdown past its grace) or broken: let the fleet take the run
            # now instead of when the lease lapses.
            await self.store.release_pass(run_id, token=token)
            raise

    async def _steps_of(self, run: RunRecord) -> list[StepRecord]:
        """The run's step records for a pass that begins it: none for its first pass,
        what this process remembers (plus what changed since) when the last pass was
        this process's, else all of them."""
        remembered = self._remembered.pop(run.run_id, None)
        if run.passes <= 1 and run.forked_from is None:
            return []  # a fork's first pass reads the steps it reuses
        if remembered is None or remembered[0] + 1 != run.token or "*" in run.changed:
            return await self.store.load_steps(run.run_id)
        steps = {s.key: s for s in remembered[1]}
        if run.changed:
            for step in await self.store.get_steps(run.run_id, run.changed):
                steps[step.key] = step
        return list(steps.values())

    def _remember(self, run_id: str, token: int, steps: list[StepRecord]) -> None:
        self._remembered[run_id] = (token, steps)
        while len(self._remembered) > REMEMBERED_RUNS:
            self._remembered.popitem(last=False)
