"""``Host``: this process's side of the engine, the one implementation of the Runtime.

It holds what the process has (the registries, the step slots, the timers, the
background tasks) and the mechanisms that work for it (the driver, the worker, the
recovery sweeps, run control), and starts and stops them.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Collection, Coroutine, Mapping, Sequence
from datetime import datetime
from typing import Any

import engine_core.metrics as metrics
from engine_core.common.clock import Clock, real_seconds
from engine_core.common.outages import Outages
from engine_core.common.periodic import Periodic
from engine_core.common.runtime import EngineConfig, JobSlot, StepFn, WorkflowFn
from engine_core.common.tasks import abandon
from engine_core.fleet.recovery import WorkflowRecovery
from engine_core.fleet.registry import FleetView, Registry, describe
from engine_core.fleet.schemas import input_schemas
from engine_core.fleet.talk_waiters import TalkWaiters
from engine_core.fleet.time_waits import what_runs_wait_on
from engine_core.fleet.timers import Timers
from engine_core.fleet.waiters import RunWaiters
from engine_core.fleet.worker import Worker
from engine_core.flow.admission import Admission
from engine_core.flow.queue_figures import limits_doc
from engine_core.flow.queue_slots import QueueSlots
from engine_core.flow.queues import QueueLimits, add_queue
from engine_core.flow.run_timers import RunTimers
from engine_core.mirror import RunMirror
from engine_core.records import TERMINAL, RunRecord, UpdateRecord
from engine_core.records import Worker as WorkerRecord
from engine_core.run.context import mark_registered
from engine_core.run.control import RunControl
from engine_core.run.driver import Driver
from engine_core.schedules.scheduler import Scheduler, StartRun
from engine_core.store import Store

#: Runs one look at whether the runs holding timers here have ended reads at most.
PRUNE_BATCH = 1000

log = logging.getLogger("engine_core")


class Host:
    """What this process offers the mechanisms that drive runs (a ``Runtime``).

    Its settings come with it (``config``, ``mirror``, ``pin_versions``, and
    ``start_run``: how its scheduler starts a run); what the process serves is
    registered through its methods (:meth:`register_workflow`,
    :meth:`register_step_function`, :meth:`declare_queue`) and read through read-only
    views (:attr:`workflows`, :attr:`step_functions`, :attr:`queues`)."""

    def __init__(
        self,
        store: Store,
        config: EngineConfig,
        mirror: RunMirror | None = None,
        *,
        pin_versions: bool = False,
        start_run: StartRun | None = None,
        clock: Clock,
    ) -> None:
        self.store = store
        self._clock = clock
        self._config = config
        self._mirror = mirror
        self._outages = Outages()
        self._instance_id = uuid.uuid4().hex
        self._workflows: dict[str, WorkflowFn] = {}
        # Each workflow's ``version=`` label; with ``pin_versions`` this process drives
        # only runs of these versions.
        self._versions: dict[str, str | None] = {}
        self._pin_versions = pin_versions
        # Each workflow's own ``retention=`` (seconds), where it has one.
        self._retention: dict[str, float] = {}
        self._step_functions: dict[str, StepFn] = {}
        self._queues: dict[str, QueueLimits] = {}
        self._queue_slots = QueueSlots(self._queues)
        self.admission: Admission | None = None
        self._slots = asyncio.Semaphore(config.concurrency)
        self._tasks: set[asyncio.Task[Any]] = set()
        #: The wake-ups armed for runs (sleeps, event timeouts, long retry delays) and
        #: for queue jobs; a run's are cancelled when it ends.
        self._timers = Timers(clock)
        self._pruning: Periodic | None = None
        self.waiters = RunWaiters(
            store,
            local=lambda run_id: self.driver.driving(run_id),
            store_timeout=config.store_timeout,
            outages=self._outages,
            divergence_ends=config.always_replay,
        )
        #: This process's callers waiting for values and answers.
        self.talk = TalkWaiters(store)
        self._serving = False
        self._closing = False
        self.control = RunControl(store, self)
        self.driver = Driver(store, self, self.control)
        self.worker: Worker | None = None
        self.recovery: WorkflowRecovery | None = None
        self.run_timers = RunTimers(store, self, self.control, self.joined_line)
        # How the scheduler starts a run (the Engine's ``start``).
        self._start_run = start_run
        self.scheduler: Scheduler | None = None
        #: This process's record in the store's registry of workers, while it serves;
        #: and the fleet's records as this process reads them (clients by name).
        self.registry: Registry | None = None
        self.fleet = FleetView(store)
        self._uncount_slots: Callable[[], None] = lambda: None
        self._input_schemas: dict[str, dict[str, Any]] = {}

    # ---- lifecycle ---------------------------------------------------------------

    async def serve(self) -> None:
        """Initialise the store and start this process's worker and recovery."""
        await self.store.init()
        self._serving = True
        self._input_schemas = input_schemas(self.workflows)  # the code does not change
        self.registry = Registry(
            self.store, self._outages, self._instance_id, self.describe, self._clock
        )
        await self.registry.start()
        self._uncount_slots = metrics.count_slots(self.slots_used)
        self.worker = Worker(self.store, self, self.control)
        self.recovery = WorkflowRecovery(self.store, self, self.control)
        self.admission = Admission(self.store, self, self._queues)
        self.worker.start()
        self.recovery.start()
        self.admission.start()
        self.run_timers.start()
        self._pruning = Periodic(
            "looking for ended runs that hold timers here",
            self.prune_timers_turn,
            every=self._config.recovery_interval,
            outages=self._outages,
            wait_first=True,
        )
        self._pruning.start()
        if self._start_run is not None:
            self.scheduler = Scheduler(
                self.store, self._outages, self.workflow_names, self._start_run, self._clock
            )
            self.scheduler.start()
        self._clock.attach(self)

    async def shut_down(self) -> None:
        """Stop serving, gracefully: claim and start nothing new, let the steps running
        now record their outcomes (a pass stops at its next step boundary and leaves the
        run owed to the fleet), and only then cancel what is left. A cancelled step
        would cost an attempt when another process takes it back."""
        self._serving = False
        self._closing = True
        self.talk.close()
        self._clock.detach(self)
        ends = real_seconds() + self._config.shutdown_grace
        if self.recovery is not None:
            await self.recovery.stop()
        if self.admission is not None:
            await self.admission.stop()
            self.admission = None
        await self.run_timers.stop()
        if self._pruning is not None:
            await self._pruning.stop()
            self._pruning = None
        if self.scheduler is not None:
            await self.scheduler.stop()
        self._timers.cancel_all()
        try:
            if self.worker is not None:
                await self.worker.stop(grace=max(0.0, ends - real_seconds()))
            if self._tasks:
                await asyncio.wait(list(self._tasks), timeout=max(0.0, ends - real_seconds()))
            await abandon(self._tasks, "passes")
        finally:
            self._closing = False
            self._uncount_slots()
            if self.registry is not None:
                await self.registry.stop()
                self.registry = None

    # ---- on a clock that moves by itself (``common.clock.Settling``) ------------------

    def busy(self) -> bool:
        """Whether this process is working now: a pass, a job, a background task, or a
        turn of one of its loops (admission, delays and deadlines, schedules, recovery)."""
        loops = (self.worker, self.admission, self.scheduler, self.recovery)
        return (
            bool(self._tasks)
            or self.driver.busy
            or self.run_timers.busy
            or any(part is not None and part.busy for part in loops)
        )

    async def waits_only_on_time(self) -> bool:
        """Whether every run this process drives waits only on time (a run owed a pass
        that nobody took is driven here now, and does not)."""
        waiting = await what_runs_wait_on(self.store, self._workflows, self._clock.now())
        for run_id in waiting.owed:
            self.kick(run_id)
        return not waiting.owed and not waiting.other

    def time_moved(self) -> None:
        """The clock jumped: this process's record in the registry is written again (it
        would read as expired)."""
        if self.registry is not None:
            self.registry.refresh_soon()

    def slots_used(self) -> int:
        """How many of this process's step slots are taken now."""
        free = getattr(self._slots, "_value", self._config.concurrency)
        return max(0, self._config.concurrency - int(free))

    def describe(self) -> WorkerRecord:
        """This process as the registry of workers records it."""
        return describe(
            self._instance_id,
            list(self._workflows),
            list(self._step_functions),
            {name: limits_doc(limits) for name, limits in self._queues.items()},
            self._config.concurrency,
            self.slots_used(),
            self._versions,
            pinned=self._pin_versions,
            input_schemas=self._input_schemas,
        )

    # ---- what this process serves --------------------------------------------------

    def register_workflow(
        self, name: str, fn: WorkflowFn, *, version: str | None, retention: float | None = None
    ) -> None:
        """Serve ``fn`` as the workflow ``name``; ``version``: the label its runs carry;
        ``retention``: how long its ended runs are kept, seconds (the same function
        again is fine; another under a taken name, ``ValueError``)."""
        _register(self._workflows, name, fn, "workflow")
        self._versions[name] = version
        if retention is not None:
            self._retention[name] = retention

    def register_step_function(self, name: str, fn: StepFn) -> None:
        """Serve ``fn`` as the step function ``name`` (as :meth:`register_workflow`)."""
        _register(self._step_functions, name, fn, "step function")

    def declare_queue(self, limits: QueueLimits) -> None:
        """Declare a queue; declaring it again is fine only with the same limits."""
        add_queue(self._queues, limits)

    @property
    def workflows(self) -> Mapping[str, WorkflowFn]:
        """The workflows this process registered, by name."""
        return self._workflows

    @property
    def step_functions(self) -> Mapping[str, StepFn]:
        """The step functions this process registered, by name."""
        return self._step_functions

    @property
    def queues(self) -> Mapping[str, QueueLimits]:
        """The queues this process declared, by name."""
        return self._queues

    # ---- the Runtime -------------------------------------------------------------

    @property
    def config(self) -> EngineConfig:
        """The engine's options."""
        return self._config

    @property
    def instance_id(self) -> str:
        """This process's identity as a holder of leases and claims."""
        return self._instance_id

    @property
    def clock(self) -> Clock:
        """The engine's clock."""
        return self._clock

    @property
    def mirror(self) -> RunMirror | None:
        """The run mirror, if the engine has one."""
        return self._mirror

    @property
    def outages(self) -> Outages:
        """The store outages as this process sees them."""
        return self._outages

    @property
    def slots(self) -> asyncio.Semaphore:
        """The step slots (``concurrency``) this process's steps share."""
        return self._slots

    @property
    def serving(self) -> bool:
        """Whether this process runs work (inside ``async with engine``)."""
        return self._serving

    @property
    def closing(self) -> bool:
        """Whether this process is shutting down (it starts nothing new)."""
        return self._closing

    def workflow_fn(self, name: str) -> WorkflowFn | None:
        """The body of the workflow ``name`` registered here, or None."""
        return self._workflows.get(name)

    def workflow_names(self) -> Sequence[str]:
        """The workflows registered here."""
        return list(self._workflows)

    def workflow_version(self, name: str) -> str | None:
        """The ``version=`` label of the workflow ``name`` registered here, or None."""
        return self._versions.get(name)

    def retention(self, workflow: str, stored: float | None = None) -> float | None:
        """How long an ended run of ``workflow`` is kept (see ``Runtime.retention``)."""
        own = self._retention.get(workflow)
        if own is not None:
            return own
        return stored if stored is not None else self._config.retention

    def drives_version(self, run: RunRecord) -> bool:
        """Whether this process drives ``run``: always, unless ``pin_versions`` and the
        run's version is not the one registered here."""
        return not self._pin_versions or run.version == self._versions.get(run.workflow)

    def step_fn(self, name: str) -> StepFn | None:
        """The step function ``name`` registered here, or None."""
        return self._step_functions.get(name)

    def step_function_names(self) -> Sequence[str]:
        """The step functions registered here."""
        return list(self._step_functions)

    def room_to_adopt(self) -> int:
        """How many runs this process may still take on at once (none when it does not serve)."""
        if not self._serving:
            return 0
        return max(0, 2 * self._config.concurrency - self.driver.backlog)

    def adopt(self, run: RunRecord) -> None:
        """Drive ``run``, just inserted holding this process's lease."""
        self.driver.spawn(run.run_id, adopted=run)

    def kick(self, run_id: str, on_taken: Callable[[], None] | None = None) -> bool:
        # A client runs no passes: the owed pass is in the store for the fleet. Nor does
        # a process with a backlog take more: the fleet's workers share it.
        """Begin a pass of ``run_id`` here, unless this process does not serve or has a
        backlog; whether it took it."""
        if not self._serving or self.driver.backlog >= 4 * self._config.concurrency:
            return False
        return self.driver.spawn(run_id, on_taken)

    async def drive(self, run_id: str) -> bool:
        """Drive ``run_id`` here until its passes end; whether it was driven here."""
        return await self.driver.drive(run_id)

    def schedules_changed(self) -> None:
        """A schedule was created or resumed here: the scheduler looks again at once."""
        if self.scheduler is not None:
            self.scheduler.wake()

    def work_arrived(self) -> None:
        """Queue jobs may be waiting: the worker polls at once."""
        if self.worker is not None:
            self.worker.wake()

    def job_slot(self, function: str) -> JobSlot | None:
        """A slot to run a job of ``function`` here right after its dispatch, when this
        process serves it and has room; else None."""
        if not self._serving or self.worker is None or function not in self._step_functions:
            return None
        return self.worker.slot()

    def arm_timer(self, run_id: str, due_at: datetime) -> None:
        """Trigger ``run_id`` at ``due_at`` (a sleep, an event's timeout, a long retry
        delay), while this process serves."""
        if not self._serving:
            return

        def fire() -> None:
            if self._serving:
                # Waits out a store outage: a wake-up is not dropped for want of it.
                wake = self._outages.call(lambda: self.control.trigger(run_id))
                self.spawn(wake, f"wake-up of run {run_id}")

        self._timers.at((run_id, due_at), due_at, fire, run_id=run_id)

    def keep_timers(self, run_id: str, due_at: Collection[datetime]) -> None:
        """Keep only the timers of ``run_id`` due at ``due_at`` (what its last pass armed)."""
        self._timers.keep_only(run_id, {(run_id, d) for d in due_at})

    def arm_work_timer(self, due_at: datetime) -> None:
        """Wake the worker at ``due_at`` (a queue job due then)."""
        if self._serving:
            self._timers.at(("work", due_at), due_at, self.work_arrived)

    def run_settled(self, run: RunRecord) -> None:
        # Its wake-ups, delay and deadline will never be needed: a long-lived process
        # holds timers for live runs only.
        """``run`` ended here: drop its timers, tell its waiters, and look at its queue's
        line again."""
        self._timers.cancel_run(run.run_id)
        self.run_timers.ended(run.run_id)
        self.waiters.settled(run)
        self.talk.wake(run.run_id, ended=True)
        if run.queue is not None:
            self.joined_line(run.queue)  # a slot may have freed

    def value_written(self, run_id: str) -> None:
        """A value of the run landed, written here: wake the readers waiting here."""
        self.talk.wake(run_id)

    def update_answered(self, update: UpdateRecord) -> None:
        """This process answered ``update``: hand the answer to its callers here."""
        self.talk.wake(update.run_id, update)

    def run_stopped(self, run: RunRecord) -> None:
        """``run`` was suspended here (a pass found it diverged): its waiters are told
        when a suspension ends their wait (``always_replay``)."""
        if self.waiters.ends_wait(run):
            self.waiters.settled(run)

    def reentered(self, run: RunRecord) -> None:
        """``run`` was put back to run (a retry, a resume, a fork): arm its deadline and
        begin it, or look at its queue's line."""
        if self._serving and run.deadline_at is not None:
            self.run_timers.arm(run)
        if run.status == "queued":
            if run.queue is not None:
                self.joined_line(run.queue)
        else:
            self.kick(run.run_id)

    def take_queue_slot(self, run: RunRecord) -> bool:
        """Take one of the ``worker_concurrency`` slots of ``run``'s queue; whether one was
        free."""
        return self._queue_slots.take(run)

    def give_queue_slot(self, run: RunRecord) -> None:
        """Give back ``run``'s queue slot; a run deferred for it begins now."""
        deferred = self._queue_slots.give(run)
        if deferred is not None:
            self.kick(deferred)

    async def prune_timers_turn(self) -> None:
        """One turn of the loop that drops timers of runs ended elsewhere."""
        await self.prune_timers()

    async def prune_timers(self) -> int:
        """Cancel the timers held for runs that ended in another process (this one
        cancels a run's timers as it ends it): one read per 1,000 runs holding timers.
        Returns for how many runs."""
        holding = sorted(set(self._timers.run_ids()) | set(self.run_timers.run_ids()))
        pruned = 0
        for first in range(0, len(holding), PRUNE_BATCH):
            batch = holding[first : first + PRUNE_BATCH]
            found = await self.store.get_runs(batch)
            live = {r.run_id for r in found if r.status not in TERMINAL}
            for run_id in batch:
                if run_id not in live:
                    self._timers.cancel_run(run_id)
                    self.run_timers.ended(run_id)
                    pruned += 1
        return pruned

    # ---- flow control ------------------------------------------------------------

    def joined_line(self, queue: str) -> None:
        """A run of ``queue`` joined its line or ended: its admitter here looks again."""
        if self.admission is not None:
            self.admission.poke(queue)

    def spawn(self, coro: Coroutine[Any, Any, Any], what: str) -> None:
        """Run ``coro`` in the background (awaited at shutdown; a failure is logged, naming
        ``what``)."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.error("%s failed", what, exc_info=t.exception())

        task.add_done_callback(done)


def _register(registry: dict[str, Any], name: str, fn: Any, what: str) -> None:
    if name in registry and registry[name] is not fn:
        raise ValueError(f"a {what} named {name!r} is already registered")
    registry[name] = fn
    mark_registered(fn, what, name)
