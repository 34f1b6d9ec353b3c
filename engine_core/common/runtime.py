"""The narrow interface the engine's mechanisms run against, instead of the ``Engine``.

Passes, the worker, recovery and run control each receive a :class:`Runtime` (and the
store) explicitly. ``Engine`` provides the one implementation; a test may provide
another.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Coroutine, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from engine_core.common.clock import Clock
from engine_core.common.durations import Duration, check_retention, parse_duration
from engine_core.common.outages import Outages
from engine_core.mirror import RunMirror
from engine_core.records import RunRecord, StepRecord, UpdateRecord

#: ``async def fn(ctx, input)``: a registered workflow body.
WorkflowFn = Callable[[Any, Any], Awaitable[Any]]
#: ``async def fn(payload)``: a registered step function.
StepFn = Callable[[Any], Awaitable[Any]]


@dataclass(frozen=True)
class EngineConfig:
    """The engine's options, in seconds."""

    lease_ttl: float
    recovery_interval: float
    stalled_after: float
    undispatched_after: float
    concurrency: int
    #: How long leaving ``async with`` waits for running steps before cancelling them.
    shutdown_grace: float
    #: How long a client call (``start``...) waits out a store outage before it raises
    #: :class:`~engine_core.StoreUnavailableError`.
    store_timeout: float = 30.0
    #: Every pass ends after each step it records, and the next replays the body from
    #: the top (``Engine(always_replay=True)``: non-determinism shows in tests).
    always_replay: bool = False
    #: How long an ended run is kept (``Engine(retention=...)``), None: for ever.
    retention: float | None = None

    @classmethod
    def of(
        cls,
        *,
        lease_ttl: Duration,
        recovery_interval: Duration,
        stalled_after: Duration,
        undispatched_after: Duration,
        concurrency: int,
        shutdown_grace: Duration | None,
        store_timeout: Duration,
        always_replay: bool = False,
        retention: Duration | None = None,
    ) -> EngineConfig:
        """The options as ``Engine`` takes them (seconds or duration strings), checked."""
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be a positive integer, not {concurrency!r}")
        ttl = parse_duration(lease_ttl, what="lease_ttl")
        if ttl <= 0:
            raise ValueError("lease_ttl must be longer than zero")
        grace = (
            min(ttl, 30.0)
            if shutdown_grace is None
            else parse_duration(shutdown_grace, what="shutdown_grace")
        )
        return cls(
            lease_ttl=ttl,
            recovery_interval=parse_duration(recovery_interval, what="recovery_interval"),
            stalled_after=parse_duration(stalled_after, what="stalled_after"),
            undispatched_after=parse_duration(undispatched_after, what="undispatched_after"),
            concurrency=concurrency,
            shutdown_grace=grace,
            store_timeout=parse_duration(store_timeout, what="store_timeout"),
            always_replay=bool(always_replay),
            retention=check_retention(retention),
        )


class JobSlot(Protocol):
    """A place kept in this process's worker for one queue job."""

    def hold(self, job: StepRecord) -> None:
        """``job`` is about to be inserted claimed by this process, to run here."""

    def run(self, job: StepRecord) -> Awaitable[StepRecord | None]:
        """Run ``job`` (inserted claimed by this process) here. Resolves, once its
        outcome is durable, to the job as it was recorded (succeeded, failed, or back
        on the queue for a retry), or None when it was not (its claim was lost)."""

    def release(self) -> None:
        """Give the place back unused."""


class Runtime(Protocol):
    """What this process offers the mechanisms that drive runs."""

    @property
    def config(self) -> EngineConfig:
        """The engine's options."""

    @property
    def instance_id(self) -> str:
        """This engine's identity as a lease and claim holder."""

    @property
    def clock(self) -> Clock:
        """The engine's clock: every time a mechanism reads, stamps or waits for."""

    @property
    def mirror(self) -> RunMirror | None:
        """The run mirror, if any."""

    @property
    def outages(self) -> Outages:
        """Whether the store is away now, and how to wait for it."""

    @property
    def slots(self) -> asyncio.Semaphore:
        """Bounds this process's step work (``concurrency``)."""

    @property
    def serving(self) -> bool:
        """Whether this process runs work (inside ``async with``)."""

    @property
    def closing(self) -> bool:
        """Whether this process is shutting down: start no new step."""

    def workflow_fn(self, name: str) -> WorkflowFn | None:
        """The registered workflow body, or None."""

    def workflow_names(self) -> Sequence[str]:
        """Every registered workflow name."""

    def workflow_version(self, name: str) -> str | None:
        """The ``version=`` label the workflow was registered with, if any."""

    def retention(self, workflow: str, stored: float | None = None) -> float | None:
        """How long a run of ``workflow`` is kept once it ended (seconds; None: for
        ever): the workflow's ``retention=`` where registered here, else ``stored`` (what
        the run was started with), else the engine's ``retention=``."""

    def drives_version(self, run: RunRecord) -> bool:
        """Whether this process may drive ``run`` (``pin_versions``: only the runs of
        the versions it registers)."""

    def step_fn(self, name: str) -> StepFn | None:
        """The registered step function, or None."""

    def step_function_names(self) -> Sequence[str]:
        """Every registered step function name."""

    def room_to_adopt(self) -> int:
        """How many more runs this process could begin driving at once (0 unless it
        serves)."""

    def adopt(self, run: RunRecord) -> None:
        """Drive ``run``, whose first pass this process began in the write that made it
        runnable (inserted or admitted holding this process's lease)."""

    def kick(self, run_id: str, on_taken: Callable[[], None] | None = None) -> bool:
        """A run is owed a pass: drive it here in the background when serving (once per
        run at a time; ``on_taken`` is called if another process holds it). Returns
        whether a drive started."""

    async def drive(self, run_id: str) -> bool:
        """Give the run passes here now; False if another process holds it."""

    def work_arrived(self) -> None:
        """A queue job or an owed pass may be waiting: wake the worker."""

    def job_slot(self, function: str) -> JobSlot | None:
        """A place for a job of ``function`` in this process's worker, if it serves, has
        the function and has room now: the dispatching pass then waits for the job
        here instead of ending."""

    def arm_timer(self, run_id: str, due_at: datetime) -> None:
        """Trigger the run when ``due_at`` comes (while serving)."""

    def keep_timers(self, run_id: str, due_at: Collection[datetime]) -> None:
        """A pass of the run parked, having armed its wake-ups for ``due_at``: its other
        wake-ups are superseded (a wait that ended, a retry that ran) and dropped."""

    def arm_work_timer(self, due_at: datetime) -> None:
        """Wake the worker when a queue job falls due at ``due_at`` (while serving)."""

    def run_stopped(self, run: RunRecord) -> None:
        """``run`` was suspended in this process (a pass found it diverged): wake its
        waiters if that ends their wait (``always_replay``)."""

    def run_settled(self, run: RunRecord) -> None:
        """``run`` reached a terminal status in this process: wake its waiters (and its
        queue's admitter: a slot may have freed)."""

    def value_written(self, run_id: str) -> None:
        """A value of the run landed, written here: wake the readers waiting here."""

    def update_answered(self, update: UpdateRecord) -> None:
        """This process answered ``update`` (durably): hand the answer to the callers
        waiting for it here."""

    def reentered(self, run: RunRecord) -> None:
        """``run`` went live again (a retry): arm its deadline here, and tell its
        queue's admitter (a ``queued`` run) or drive it (while serving)."""

    def take_queue_slot(self, run: RunRecord) -> bool:
        """Count a drive of ``run`` against its queue's ``worker_concurrency`` here;
        False when none is free (the run is kicked again when one frees)."""

    def give_queue_slot(self, run: RunRecord) -> None:
        """A drive counted by :meth:`take_queue_slot` ended."""

    def spawn(self, coro: Coroutine[Any, Any, Any], what: str) -> None:
        """Run ``coro`` in the background, logging a failure as ``what``."""
