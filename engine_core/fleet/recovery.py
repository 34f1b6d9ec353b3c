"""``WorkflowRecovery``: bring back the work a dead process left behind.

One pass at startup and one every ``recovery_interval``, under a store-wide lease so a
fleet does not sweep in step. Replay is the recovery: every finished step is
memoised, so giving a pass to a run that was not stuck costs a replay and changes
nothing. What replay cannot move (a step parked on ``scheduled`` whose timer died
with its process) is judged here by the clock.
"""

from __future__ import annotations

import functools
import logging
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta

import engine_core.common.lifecycle_log as lifecycle_log
import engine_core.metrics as metrics
from engine_core.common.clock import real_seconds
from engine_core.common.journal import merged_steps
from engine_core.common.outages import LAST_WAIT_S
from engine_core.common.periodic import Periodic
from engine_core.common.runtime import Runtime
from engine_core.errors import CodecError
from engine_core.records import TERMINAL, RunRecord, StepPage, StepRecord
from engine_core.run.control import RunControl
from engine_core.run.leases import holding
from engine_core.store import Store

log = logging.getLogger("engine_core.fleet.recovery")

RECOVERY_LEASE = "workflow-recovery"
PAGE_SIZE = 500
RUN_BATCH = 500
#: Batches of expired runs one pass deletes at most (``RUN_BATCH`` each).
EXPIRE_BATCHES = 10
BACKOFF_START_S = 30.0
BACKOFF_MAX_S = 600.0
BACKOFF_MAX_ENTRIES = 10_000
# Past startup a sleep is only known lost once it is this overdue: until then the
# timer of the process that armed it may still fire.
WAKE_GRACE_S = 2.0


#: A fork begun this long ago and never written whole was abandoned by its forker.
FORK_GRACE_S = 3600.0
REPORT_SAMPLE = 100


@dataclass
class RecoveryReport:
    """What one recovery pass did: counts, and the first run ids it touched (a bounded
    sample, so a sweep over N parked steps keeps no O(N) list)."""

    woken: int = 0
    rearmed: int = 0
    redispatched: int = 0
    resumed: int = 0
    #: Ended runs past their retention deleted (or made ready for the store to delete).
    expired: int = 0
    skipped: bool = False
    runs: list[str] = field(default_factory=list)

    def note(self, what: str, run_id: str) -> None:
        """Count one ``what`` (a field's name) done for ``run_id``, and keep the run among
        the sampled ones."""
        setattr(self, what, getattr(self, what) + 1)
        if len(self.runs) < REPORT_SAMPLE and run_id not in self.runs:
            self.runs.append(run_id)

    @property
    def total(self) -> int:
        """How many things the pass did, all kinds together."""
        return self.woken + self.rearmed + self.redispatched + self.resumed

    def summary(self) -> str:
        """The counts as one line of text."""
        line = (
            f"{self.woken} sleeps woken, {self.rearmed} re-armed, "
            f"{self.redispatched} steps re-dispatched, {self.resumed} runs resumed"
        )
        return line + (f", {self.expired} ended runs expired" if self.expired else "")


class RedispatchBackoff:
    """Per-run, per-process record of when a run may next be re-driven.

    Doubles from 30 s to 10 min so a backlog is not amplified by sweeps firing at the
    runs it already delays; bounded to 10,000 entries (oldest dropped first).
    """

    def __init__(self, max_entries: int = BACKOFF_MAX_ENTRIES) -> None:
        self._eligible: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._max = max_entries

    def __len__(self) -> int:
        return len(self._eligible)

    def eligible(self, run_id: str, now: float) -> bool:
        """Whether ``run_id`` may have its lost dispatch re-sent at ``now`` (real
        seconds)."""
        entry = self._eligible.get(run_id)
        return entry is None or entry[0] <= now

    def note(self, run_id: str, now: float) -> None:
        """``run_id`` had a dispatch re-sent at ``now``: the next waits twice as long as the
        last (bounded)."""
        previous = self._eligible.pop(run_id, None)
        delay = BACKOFF_START_S if previous is None else min(previous[1] * 2, BACKOFF_MAX_S)
        self._eligible[run_id] = (now + delay, delay)
        while len(self._eligible) > self._max:
            self._eligible.popitem(last=False)

    def forget(self, run_id: str) -> None:
        """Drop a record for a re-drive that did not happen (a live owner had the run)."""
        self._eligible.pop(run_id, None)


class WorkflowRecovery:
    """Every way an engine brings back work a dead process left behind (made by the
    ``Engine``: ``async with engine`` runs it, ``engine.recover()`` runs one pass)."""

    def __init__(self, store: Store, runtime: Runtime, control: RunControl) -> None:
        self.store = store
        self.runtime = runtime
        self.control = control
        self.backoff = RedispatchBackoff()
        self._loop: Periodic | None = None

    def start(self) -> None:
        """Start the recovery loop: a pass at once (the startup pass), then one every
        ``recovery_interval``."""
        startup = True

        async def turn() -> None:
            nonlocal startup
            await self.recover(startup=startup)
            startup = False

        self._loop = Periodic(
            "workflow recovery",
            turn,
            every=self.runtime.config.recovery_interval,
            outages=self.runtime.outages,
        )
        self._loop.start()

    @property
    def busy(self) -> bool:
        """Whether a recovery pass runs now or is about to."""
        return self._loop is not None and self._loop.busy

    async def stop(self) -> None:
        """Stop the recovery loop (a pass in progress is cancelled)."""
        if self._loop is not None:
            await self._loop.stop()

    async def recover(self, *, startup: bool = False) -> RecoveryReport:
        """One pass over every sweep, if this instance gets the recovery lease.

        ``startup`` is a process that has armed nothing yet: sleeps not yet due get a
        timer here for what remains of them, and overdue ones wake without grace.
        """
        runtime = self.runtime
        report = RecoveryReport()
        async with holding(
            self.store, RECOVERY_LEASE, runtime.instance_id, runtime.config.lease_ttl
        ) as held:
            if held is None:
                return RecoveryReport(skipped=True)
            await self._sweep_scheduled(report, startup)
            await self._sweep_unnotified(report)
            await self._sweep_lapsed_claims(report)
            await self._sweep_in_flight(report)
            await self._sweep_stalled(report)
            # Forks whose forker died between its writes (see ``Store.fork_run``).
            forked_before = runtime.clock.now() - timedelta(seconds=FORK_GRACE_S)
            await self.store.clean_forks(forked_before)
            await self._expire(report)
            await metrics.measure_queues(self.store.queue_names, self.store.count_queue)
        metrics.recovered(
            {
                "woken": report.woken,
                "rearmed": report.rearmed,
                "redispatched": report.redispatched,
                "resumed": report.resumed,
                "expired": report.expired,
            }
        )
        if report.total or report.expired:
            log.info("workflow recovery: %s", report.summary())
        return report

    async def _expire(self, report: RecoveryReport) -> None:
        """Retention: ended runs past their ``expire_at``, up to ``EXPIRE_BATCHES``
        batches a pass (the rest at the next)."""
        for _ in range(EXPIRE_BATCHES):
            done = await self.store.expire_runs(self.runtime.clock.now(), RUN_BATCH)
            report.expired += done
            if done < RUN_BATCH:
                return

    async def _owe(self, run_ids: Iterable[str]) -> list[str]:
        """Give these runs a pass: when serving, as many as this process can drive soon
        are kicked here (nothing written: what woke them is still in the store if this
        process dies first); the others are marked owed for the fleet's workers, in bulk.
        Runs the backoff says to leave alone are skipped. Returns the runs woken."""
        now = real_seconds()
        owed = []
        for run_id in dict.fromkeys(run_ids):
            if self.backoff.eligible(run_id, now):
                self.backoff.note(run_id, now)
                owed.append(run_id)
        marked = []
        for run_id in owed:
            # Left alone if its owner is live: nothing has earned a wait then.
            forget = functools.partial(self.backoff.forget, run_id)
            if not (self.runtime.serving and self.runtime.kick(run_id, on_taken=forget)):
                marked.append(run_id)
        if marked:
            await self.store.request_passes(marked)
        return owed

    async def _sweep_scheduled(self, report: RecoveryReport, startup: bool) -> None:
        after: StepPage | None = None
        while True:
            page = await self.store.find_scheduled_steps(PAGE_SIZE, after)
            try:
                await self._recover_page(page, report, startup)
            except Exception:
                # One bad page must not keep the sweep from the rest.
                log.exception("could not recover a page of %d scheduled steps", len(page))
            if len(page) < PAGE_SIZE:
                return
            last = page[-1]
            assert last.due_at is not None
            after = StepPage(last.due_at, last.run_id, last.key)

    async def _recover_page(
        self, page: list[StepRecord], report: RecoveryReport, startup: bool
    ) -> None:
        runtime = self.runtime
        now = runtime.clock.now()
        children = [s.child_run_id for s in page if s.kind == "child" and s.child_run_id]
        found = {r.run_id: r for r in await self.store.get_runs(children)} if children else {}
        wake: dict[str, str] = {}  # run id -> what the report counts it as
        for step in page:
            assert step.due_at is not None
            if step.kind == "dispatch":
                # The job is in the store's queue and cannot be lost; one nobody claimed
                # for ``undispatched_after`` is announced to this process's worker again.
                if step.due_at < now - timedelta(seconds=runtime.config.undispatched_after):
                    runtime.work_arrived()
                continue
            if step.kind == "child":
                child = found.get(step.child_run_id or "")
                if child is None or child.status in TERMINAL:
                    wake.setdefault(step.run_id, "resumed")
                continue
            remaining = (step.due_at - now).total_seconds()
            if remaining > 0:
                if startup and runtime.serving:
                    runtime.arm_timer(step.run_id, step.due_at)
                    report.note("rearmed", step.run_id)
            elif startup or remaining <= -WAKE_GRACE_S:
                wake.setdefault(step.run_id, "woken")
        for run_id in await self._owe(wake):
            report.note(wake[run_id], run_id)

    async def _sweep_unnotified(self, report: RecoveryReport) -> None:
        # A worker or a child run settled a step and died before telling its run.
        before = self.runtime.clock.now() - timedelta(seconds=self.runtime.config.lease_ttl)
        for step in await self.store.find_unnotified_steps(before, RUN_BATCH):
            await self.control.notify_run(step.run_id, step.key)
            report.note("resumed", step.run_id)

    async def _sweep_lapsed_claims(self, report: RecoveryReport) -> None:
        # A worker that died (or hung) holding a claim: its step goes back on the queue
        # and its next claim is a new, counted attempt.
        requeued = await self.store.requeue_lapsed_claims()
        if requeued:
            report.redispatched += requeued
            self.runtime.work_arrived()

    async def _sweep_in_flight(self, report: RecoveryReport) -> None:
        # A pass marks each step it starts on its run and clears the marks when it
        # ends, renewing its lease meanwhile; marks older than a lease are a pass that
        # died (a lost inline step, or a dispatch recorded on the run but never queued).
        config = self.runtime.config
        if self.runtime.outages.quiet_for() < config.lease_ttl + LAST_WAIT_S:
            # Just after an outage every lease has lapsed, and the passes it cut off
            # are retaking their runs (with the outcomes they could not write): taking
            # a run first would count their steps as lost attempts. A holder that died
            # meanwhile is found at a later sweep.
            return
        since = min(config.lease_ttl, config.undispatched_after)
        before = self.runtime.clock.now() - timedelta(seconds=since)
        idle = await self.store.find_idle_runs(before, RUN_BATCH, in_flight_only=True)
        kinds = {r.run_id: "redispatched" if _lost_arm(r) else "resumed" for r in idle}
        found = {r.run_id: r for r in idle}
        for run_id in await self._owe(kinds):
            report.note(kinds[run_id], run_id)
            lifecycle_log.run_recovered(found[run_id], "its pass died mid-step")

    async def _sweep_stalled(self, report: RecoveryReport) -> None:
        before = self.runtime.clock.now() - timedelta(seconds=self.runtime.config.stalled_after)
        stalled = []
        for run in await self.store.find_idle_runs(before, RUN_BATCH):
            try:
                steps = merged_steps(run, await self.store.load_steps(run.run_id))
            except CodecError as exc:  # a key this process lacks: one that has it resumes it
                log.warning("run %s looks stalled but cannot be read here: %s", run.run_id, exc)
                continue
            if any(s.status == "scheduled" or s.status == "running" for s in steps):
                continue  # parked on purpose; the scheduled sweep and the queue own it
            stalled.append(run)
        found = {r.run_id: r for r in stalled}
        for run_id in await self._owe(found):
            report.note("resumed", run_id)
            lifecycle_log.run_recovered(found[run_id], "stalled")


def _lost_arm(run: RunRecord) -> bool:
    return any(item.attempt == 0 for item in run.inflight.values())
