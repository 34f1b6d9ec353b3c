"""``Engine``: registers workflows and step functions, starts and steers runs.

Outside ``async with engine`` it is a client (start, send events, read, cancel, suspend,
resume). Inside, it is also a worker: it runs passes, claims dispatched steps, fires
timers and runs recovery. The mechanisms live in their own modules (driver, worker,
recovery, run control); the engine wires them together through a
:class:`~engine_core.common.runtime.Runtime`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from datetime import timedelta
from types import TracebackType
from typing import Any, TypeVar, overload

from engine_core.codecs.payload import PayloadCodec
from engine_core.codecs.sealed_store import sealed
from engine_core.codecs.sealing import check_decoded
from engine_core.common.clock import REAL_CLOCK, Clock
from engine_core.common.convert import declared_return, from_json
from engine_core.common.durations import Duration, check_retention, parse_duration
from engine_core.common.runtime import EngineConfig
from engine_core.common.status import (
    QueueStatus,
    ReplayReport,
    RunStatus,
    TimelineEntry,
    fold_status,
    timeline,
)
from engine_core.common.values import (
    check_name,
    check_page,
    check_run_id,
)
from engine_core.errors import StoreUnavailableError
from engine_core.fleet.recovery import RecoveryReport, WorkflowRecovery
from engine_core.flow.debounce import check_debounce, check_on_duplicate
from engine_core.flow.queue_figures import queue_figures
from engine_core.flow.queue_figures import store_declared_limits as declare_in_store
from engine_core.flow.queues import declare
from engine_core.flow.starts import check_registered
from engine_core.front.host import Host
from engine_core.front.listing_api import ListingApi
from engine_core.front.repair_api import MAX_FORKS, RepairApi
from engine_core.front.schedule_api import ScheduleApi
from engine_core.front.starting import start_run
from engine_core.front.talk_api import TalkApi
from engine_core.mirror import RunMirror
from engine_core.records import TERMINAL, Worker
from engine_core.run.replay_check import replay_check
from engine_core.run.results import outcome
from engine_core.run.stream_reader import read_stream
from engine_core.schedules.control import ScheduleControl
from engine_core.schedules.declared import DeclaredSchedule, store_declared
from engine_core.store import Store
from engine_core.streams import StreamEntry

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
#: The most runs one ``list_runs`` call returns (page with ``after`` for more).


class Engine(ScheduleApi, RepairApi, TalkApi, ListingApi):
    """A durable workflow engine over a :class:`~engine_core.store.Store`."""

    def __init__(
        self,
        store: Store,
        *,
        lease_ttl: Duration = "30s",
        recovery_interval: Duration = "30s",
        stalled_after: Duration = "5m",
        undispatched_after: Duration = "30s",
        concurrency: int = 16,
        mirror: RunMirror | None = None,
        shutdown_grace: Duration | None = None,
        store_timeout: Duration = "30s",
        pin_versions: bool = False,
        clock: Clock | None = None,
        always_replay: bool = False,
        codec: PayloadCodec | None = None,
        retention: Duration | None = None,
    ) -> None:
        """Options in seconds or duration strings (docs/guides/recovery.md). ``clock``
        (the real one by default) and ``always_replay`` (every pass ends after each step
        it records, so a workflow that is not deterministic fails its tests with
        :class:`NonDeterminismError`): docs/guides/testing.md; a store that cannot follow
        the clock raises ``ValueError``. ``codec`` (a
        :class:`~engine_core.codecs.PayloadCodec` for every user value at rest) and
        ``retention`` (how long an ended run is kept; None: until pruned):
        docs/guides/data-at-rest.md."""
        store = sealed(store, codec)
        self.store = store
        self.mirror = mirror
        self.config = EngineConfig.of(
            lease_ttl=lease_ttl,
            recovery_interval=recovery_interval,
            stalled_after=stalled_after,
            undispatched_after=undispatched_after,
            concurrency=concurrency,
            shutdown_grace=shutdown_grace,
            store_timeout=store_timeout,
            always_replay=always_replay,
            retention=retention,
        )
        chosen = REAL_CLOCK if clock is None else clock
        store.follow_clock(chosen)  # a store that cannot follow it refuses it here
        # pin_versions: drive only runs of the versions this process registers
        # (docs/guides/changing-code.md).
        self._host = Host(
            store,
            self.config,
            mirror,
            pin_versions=bool(pin_versions),
            start_run=self._start_scheduled,
            clock=chosen,
        )
        self._control = self._host.control
        self._schedules = ScheduleControl(
            store, self._host.workflows, self._host.schedules_changed, chosen
        )
        self._declared_schedules: dict[str, DeclaredSchedule] = {}

    @property
    def instance_id(self) -> str:
        """This engine's identity as a holder of leases and claims."""
        return self._host.instance_id

    async def _call(self, fn: Callable[[], Awaitable[_T]], *, again: bool = True) -> _T:
        """A client call's store work: an unreachable store is waited out up to
        ``store_timeout``, then :class:`StoreUnavailableError`. ``again=False``: tried
        once (a repeat would not be the same call), still within ``store_timeout``."""
        timeout = self.config.store_timeout
        outages = self._host.outages
        if again:
            return await outages.call(fn, timeout=timeout, watched=True)
        try:
            async with asyncio.timeout(timeout):
                return await outages.watch(fn())
        except TimeoutError:
            raise StoreUnavailableError(f"the store did not answer within {timeout:g} s") from None

    # ---- registration ------------------------------------------------------------

    def workflow(
        self, name: str, *, version: str | None = None, retention: Duration | None = None
    ) -> Callable[[F], F]:
        """Register ``async def fn(ctx, input)`` as the workflow ``name``; ``version`` is
        a label stored on every run it starts (``RunStatus.version``); ``retention``: how
        long its runs are kept once ended (a duration), instead of the engine's."""
        if version is not None:
            check_name(version, "workflow version")
        check_name(name, "workflow name")
        kept = check_retention(retention)

        def register(fn: F) -> F:
            self._host.register_workflow(name, fn, version=version, retention=kept)
            return fn

        return register

    def step_function(self, name: str) -> Callable[[F], F]:
        """Register ``async def fn(payload)`` as a step function any worker may run."""
        check_name(name, "step function name")

        def register(fn: F) -> F:
            self._host.register_step_function(name, fn)
            return fn

        return register

    def queue(
        self,
        name: str,
        *,
        concurrency: int | None = None,
        worker_concurrency: int | None = None,
        key_concurrency: int | None = None,
        rate: str | None = None,
        key_rate: str | None = None,
        fairness: str | None = None,
    ) -> None:
        """Declare the queue ``name`` and its limits (None: no limit), before ``async
        with``, the same way in every process that starts or drives its runs.

        ``concurrency`` bounds the queue's admitted runs across the fleet and
        ``key_concurrency`` those of one ``key``, from admission until the run ends;
        ``worker_concurrency`` bounds how many of them this process drives at once;
        ``rate="N/period"`` allows at most N admissions in any window of that length,
        ``key_rate="N/period"`` at most N per ``key``. ``fairness="key"`` admits the
        keys in turn among runs of equal priority (None: first come, first served).
        """
        if self._host.serving:
            raise RuntimeError("declare queues before `async with engine`")
        limits = declare(
            name,
            concurrency=concurrency,
            worker_concurrency=worker_concurrency,
            key_concurrency=key_concurrency,
            rate=rate,
            key_rate=key_rate,
            fairness=fairness,
        )
        self._host.declare_queue(limits)

    # ---- lifecycle ---------------------------------------------------------------

    async def __aenter__(self) -> Engine:
        await self._host.serve()
        try:  # what the code declares, stored for every process to see
            await self._call(lambda: declare_in_store(self.store, self._host.queues))
            declared = self._declared_schedules
            if await self._call(lambda: store_declared(self.store, declared, self._host.clock)):
                self._host.schedules_changed()
        except BaseException:
            await self._host.shut_down()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._host.shut_down()

    @property
    def serving(self) -> bool:
        """Whether this engine runs work (inside ``async with``)."""
        return self._host.serving

    # ---- the client API ----------------------------------------------------------

    async def start(
        self,
        workflow: str,
        input: Any = None,
        *,
        run_id: str | None = None,
        queue: str | None = None,
        key: str | None = None,
        priority: int = 0,
        dedup_id: str | None = None,
        delay: Duration | None = None,
        deadline: Duration | None = None,
        debounce_key: str | None = None,
        debounce: Duration | None = None,
        debounce_timeout: Duration | None = None,
        on_duplicate: str = "raise",
    ) -> str:
        """Record a run of ``workflow`` and return its id; the run proceeds in the background.

        ``workflow`` is registered on this engine or on a live worker of the fleet (read
        from the registry of workers); else :class:`WorkflowNotRegisteredError`.

        With a ``run_id`` that exists, returns it and starts nothing. With ``queue`` the
        run waits ``queued`` until its queue admits it (``key`` and ``priority`` as
        :meth:`queue` describes); with ``delay`` it begins no earlier than that from
        now; past ``deadline`` from now it is cancelled with its children. While a run
        that has not ended holds the same ``dedup_id`` on the same queue, raises
        :class:`DuplicateRunError` and records nothing (``on_duplicate="return"``: returns
        that run's id and records nothing; ``"cancel"``: cancels that run, with its
        children, and starts this one). With ``debounce_key``: joins the pending run of
        this workflow and key (its input replaced; its id returned) or makes one,
        ``queued`` until ``debounce`` passes with no further start, and at most
        ``debounce_timeout`` after the first. While the store is unreachable it waits, up
        to the engine's ``store_timeout``, then raises :class:`StoreUnavailableError`.
        """
        debounced = check_debounce(
            debounce_key,
            debounce,
            debounce_timeout,
            run_id=run_id,
            dedup_id=dedup_id,
            delay=delay,
        )
        return await start_run(
            self._host,
            workflow,
            input,
            run_id=run_id,
            queue=queue,
            key=key,
            priority=priority,
            dedup_id=dedup_id,
            delay=delay,
            deadline=deadline,
            debounce=debounced,
            on_duplicate=check_on_duplicate(on_duplicate, dedup_id),
        )

    async def send_event(self, run_id: str, name: str, payload: Any = None) -> None:
        """Deliver event ``name`` to the run; kept until the run waits for it. Raises
        :class:`RunNotActiveError` (storing nothing) for a run that has ended."""
        # Not repeated whole: a repeat would store a second event with a new id.
        await self._call(lambda: self._control.send_event(run_id, name, payload), again=False)

    async def status(self, run_id: str) -> RunStatus:
        """The run's status, with each step folded to its latest attempt."""
        check_run_id(run_id)
        # The reads go out together: one round trip of waiting, not four.
        run, steps, forks, values = await asyncio.gather(
            self._call(lambda: self._control.get(run_id)),
            self._call(lambda: self.store.load_steps(run_id)),
            self._call(lambda: self.store.list_forks(run_id, limit=MAX_FORKS)),
            self._call(lambda: self.store.list_values(run_id)),
        )
        status = fold_status(run, steps)
        check_decoded(status.input, status.output, status.error)
        for step in status.steps.values():
            check_decoded(step.result, step.error)
        published = {v.key: v.value for v in values}
        check_decoded(*published.values())
        return replace(status, forks=len(forks), values=published)

    def read_stream(
        self, run_id: str, key: str, offset: int = 0, timeout: Duration | None = None
    ) -> AsyncIterator[StreamEntry]:
        """The run's stream ``key`` from position ``offset``, in order, as entries come
        (``entry.value``); ends at ``close_stream`` or when the run ends. ``timeout``:
        ``TimeoutError`` if it has not ended by then. See ``engine_core.streams``."""
        return read_stream(self.store, run_id, key, offset=offset, timeout=timeout)

    async def history(self, run_id: str) -> list[TimelineEntry]:
        """Every attempt of every step of the run, with the time of each transition."""
        check_run_id(run_id)
        run, steps = await asyncio.gather(
            self._call(lambda: self._control.get(run_id)),
            self._call(lambda: self.store.load_steps(run_id)),
        )
        entries = timeline(run, steps)
        check_decoded(*(e.error for e in entries))
        return entries

    @overload
    async def result(self, run_id: str, timeout: float | None = None, *, returns: type[T]) -> T: ...

    @overload
    async def result(
        self, run_id: str, timeout: float | None = None, *, returns: None = None
    ) -> Any: ...

    async def result(
        self, run_id: str, timeout: float | None = None, *, returns: Any = None
    ) -> Any:
        """Wait for the run to end and return its output, as the type ``returns`` or the
        registered workflow's return annotation declares.

        Raises WorkflowRunFailedError or WorkflowRunCancelledError for a run that did not
        complete, TimeoutError past ``timeout`` seconds, and StoreUnavailableError when
        the store has not answered for ``store_timeout`` seconds of the wait.
        """
        # No read first: the waiters read the awaited runs together (docs/guides/mongodb.md), so a
        # result costs no command of its own.
        check_run_id(run_id)
        try:
            # A virtual clock may skip ahead while a caller waits (docs/guides/testing.md).
            async with self._host.clock.waiting():
                run = await self._host.waiters.wait(run_id, timeout)
        except TimeoutError:
            run = await self._call(lambda: self._control.get(run_id))
            if run.status not in TERMINAL:
                message = f"run {run_id!r} is still {run.status} after {timeout} s"
                raise TimeoutError(message) from None
        output = outcome(run)  # raises for a run that did not complete
        if returns is None:
            returns = declared_return(self._host.workflows.get(run.workflow))
        return from_json(output, returns)

    async def cancel(self, run_id: str, *, compensate: bool = False) -> None:
        """Stop the run for good; with ``compensate`` its compensations run first."""
        await self._call(lambda: self._control.cancel(run_id, compensate=compensate))

    async def suspend(self, run_id: str) -> None:
        """Pause the run: no new step of it starts until :meth:`resume`."""
        await self._call(lambda: self._control.suspend(run_id))

    async def resume(self, run_id: str) -> None:
        """Set a suspended run running again and give it a pass."""
        await self._call(lambda: self._control.resume(run_id))

    async def retry(self, run_id: str) -> None:
        """Give a ``failed`` run a new pass from the step that failed it.

        That step gets one more attempt (a dispatched one goes back on the queue); the
        steps that succeeded keep their results. The run re-enters flow control as a
        start would: on a queue it is ``queued`` until admitted under the queue's limits;
        it takes its ``dedup_id`` back; its deadline is a fresh window of the ``deadline``
        it was started with, counted from this retry (a ``delay`` is not waited again).
        Raises ValueError for a run that is not ``failed``, and
        :class:`DuplicateRunError` (changing nothing) while another run that has not
        ended holds its dedup id.
        """
        # Not repeated whole: once it landed, a repeat would find the run not failed.
        await self._call(lambda: self._control.retry(run_id), again=False)

    async def delete_finished_runs(self, older_than: Duration, *, batch: int = 500) -> int:
        """Delete terminal runs last updated more than ``older_than`` ago, with their steps
        events and streams; runs that are not terminal are never touched. Returns the count."""
        age = parse_duration(older_than, what="older_than")
        before = self._host.clock.now() - timedelta(seconds=age)
        return await self._call(lambda: self._control.delete_finished(before, batch))

    async def recover(self, *, startup: bool = False) -> RecoveryReport:
        """Run one recovery pass now and return its report."""
        host = self._host
        recovery = host.recovery or WorkflowRecovery(self.store, host, self._control)
        return await recovery.recover(startup=startup)

    async def drive(self, run_id: str) -> bool:
        """Give the run passes in this process now, until it parks or ends, even outside
        ``async with``; False if another process holds it.

        Public on purpose: a test of the user's own workflows, or a tool, can advance a
        run step by step without starting workers or recovery.
        """
        return await self._host.drive(check_run_id(run_id))

    # ---- operating (the dashboard) -----------------------------------------------

    async def list_queues(self) -> list[QueueStatus]:
        """The queues declared on this engine or holding runs in the store, with their
        runs counted (waiting and admitted) and the admissions of this minute and the
        last, sorted by name."""
        host = self._host
        return await self._call(lambda: queue_figures(self.store, host.queues, host.clock))

    async def count_runs(self, workflow: str | None = None) -> dict[str, int]:
        """How many runs (of ``workflow``, when given) are in each status; a status with
        no run is absent."""
        if workflow is not None:
            check_name(workflow, "workflow name")
        return await self._call(lambda: self.store.count_runs(workflow=workflow))

    async def list_workflows(self) -> list[str]:
        """The names of the workflows that have runs in the store, sorted (registered
        on this engine or not)."""
        return await self._call(self.store.list_workflows)

    async def list_workers(self) -> list[Worker]:
        """The serving engines of the fleet, as each last recorded itself (a few
        seconds ago at most; one that stopped or died is not listed), oldest first."""
        return await self._host.outages.call(
            self.store.list_workers, timeout=self.config.store_timeout
        )

    async def replay_check(
        self,
        *,
        workflow: str | None = None,
        run_ids: list[str] | None = None,
        limit: int = 1000,
        include_ended: bool = False,
    ) -> ReplayReport:
        """Replay stored runs (of ``workflow``, or the runs ``run_ids``; those that have
        not ended unless ``include_ended``; at most ``limit``) against this process's
        code, writing nothing, each up to its first step without a record, and report
        the ones that would diverge and why. For a deploy pipeline: run it with the new
        build before it ships."""
        if workflow is not None:
            check_registered(self._host.workflows, workflow)
        check_page(limit, None, 10**9)
        if run_ids is not None:
            run_ids = [check_run_id(r) for r in run_ids]
        return await replay_check(
            self.store,
            self._host.workflows.get,
            workflows=[workflow] if workflow is not None else sorted(self._host.workflows),
            run_ids=run_ids,
            limit=limit,
            include_ended=include_ended,
            clock=self._host.clock,
        )


_T = TypeVar("_T")
