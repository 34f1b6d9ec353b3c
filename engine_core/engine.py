"""``Engine``: registers workflows and step functions, starts and steers runs.

Outside ``async with engine`` it is a client (start, send events, read, cancel, suspend,
resume). Inside, it is also a worker: it runs passes, claims dispatched steps, fires
timers and runs recovery. The mechanisms live in their own modules (driver, worker,
recovery, run control); the engine wires them together through a
:class:`~engine_core.runtime.Runtime`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, TypeVar

from engine_core.durations import Duration, parse_duration
from engine_core.errors import (
    InvalidLimitError,
    InvalidNameError,
    InvalidRunIdError,
    ScheduleNotFoundError,
    WorkflowDeadlineExceededError,
    WorkflowNotRegisteredError,
    WorkflowRunCancelledError,
    WorkflowRunFailedError,
)
from engine_core.host import Host
from engine_core.keys import CURRENT_SCHEME
from engine_core.mirror import RunMirror, mirror_run
from engine_core.queues import QueueLimits, check_priority, declare, declared
from engine_core.records import (
    FAILED_ENDINGS,
    TERMINAL,
    EventRecord,
    RunRecord,
    ScheduleRecord,
    utcnow,
)
from engine_core.recovery import RecoveryReport, WorkflowRecovery
from engine_core.runtime import EngineConfig
from engine_core.schedule_times import RUN_ID_SUFFIX_LENGTH, Schedule, make_spec, next_fire
from engine_core.scheduler import spec_of
from engine_core.status import QueueStatus, RunStatus, TimelineEntry, fold_status, timeline
from engine_core.store import Store
from engine_core.tracing import new_run_traceparent
from engine_core.values import MAX_RUN_ID_LENGTH, check_name, check_run_id, to_stored

F = TypeVar("F", bound=Callable[..., Any])
#: The most runs one ``list_runs`` call returns (page with ``after`` for more).
MAX_LIST = 10_000


class Engine:
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
    ) -> None:
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
        self.store = store
        self.mirror = mirror
        self.config = EngineConfig(
            lease_ttl=ttl,
            recovery_interval=parse_duration(recovery_interval, what="recovery_interval"),
            stalled_after=parse_duration(stalled_after, what="stalled_after"),
            undispatched_after=parse_duration(undispatched_after, what="undispatched_after"),
            concurrency=concurrency,
            shutdown_grace=grace,
            store_timeout=parse_duration(store_timeout, what="store_timeout"),
        )
        self._host = Host(store, self.config, mirror)
        self._control = self._host.control
        self._host.start_run = self._start_scheduled

    @property
    def instance_id(self) -> str:
        """This engine's identity as a holder of leases and claims."""
        return self._host.instance_id

    # ---- registration ------------------------------------------------------------

    def workflow(self, name: str) -> Callable[[F], F]:
        """Register ``async def fn(ctx, input)`` as the workflow ``name``."""
        return _register(self._host.workflows, name, "workflow")

    def step_function(self, name: str) -> Callable[[F], F]:
        """Register ``async def fn(payload)`` as a step function any worker may run."""
        return _register(self._host.step_functions, name, "step function")

    def queue(
        self,
        name: str,
        *,
        concurrency: int | None = None,
        worker_concurrency: int | None = None,
        key_concurrency: int | None = None,
        rate: str | None = None,
    ) -> None:
        """Declare the queue ``name`` and its limits (None: no limit), before ``async
        with``, the same way in every process that starts or drives its runs.

        ``concurrency`` bounds the queue's admitted runs across the fleet and
        ``key_concurrency`` those of one ``key``, from admission until the run ends;
        ``worker_concurrency`` bounds how many of them this process drives at once;
        ``rate="N/period"`` allows at most N admissions in any window of that length.
        """
        limits = declare(
            name,
            concurrency=concurrency,
            worker_concurrency=worker_concurrency,
            key_concurrency=key_concurrency,
            rate=rate,
        )
        if self._host.serving:
            raise RuntimeError("declare queues before `async with engine`")
        known = self._host.queues.get(limits.name)
        if known is not None and known != limits:
            raise ValueError(f"queue {limits.name!r} is already declared with other limits")
        self._host.queues[limits.name] = limits

    # ---- lifecycle ---------------------------------------------------------------

    async def __aenter__(self) -> Engine:
        await self._host.serve()
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
    ) -> str:
        """Record a run of ``workflow`` and return its id; the run proceeds in the background.

        With a ``run_id`` that exists, returns it and starts nothing. With ``queue`` the
        run waits ``queued`` until its queue admits it (``key`` and ``priority`` as
        :meth:`queue` describes); with ``delay`` it begins no earlier than that from
        now; past ``deadline`` from now it is cancelled with its children. While a run
        that has not ended holds the same ``dedup_id`` on the same queue, raises
        :class:`DuplicateRunError` and records nothing. While the store is unreachable
        it waits, up to the engine's ``store_timeout``, then raises
        :class:`StoreUnavailableError`.
        """
        registered = self._host.workflows
        if workflow not in registered:
            raise WorkflowNotRegisteredError(
                f"no workflow named {workflow!r} is registered on this engine "
                f"(registered: {sorted(registered) or 'none'})"
            )
        run_id = check_run_id(run_id) if run_id is not None else uuid.uuid4().hex
        limits = declared(self._host.queues, queue) if queue is not None else None
        if limits is None and (key is not None or priority != 0):
            raise ValueError("key and priority order a queue's runs: pass queue= as well")
        if key is not None:
            check_name(key, "queue key")
        check_priority(priority)
        if dedup_id is not None:
            check_name(dedup_id, "dedup_id")
        now = utcnow()
        run = RunRecord(
            run_id=run_id,
            workflow=workflow,
            status="running",
            input=to_stored(input, f"input of workflow {workflow!r}"),
            created_at=now,
            updated_at=now,
            wire={"traceparent": new_run_traceparent(), "started_by": self.instance_id},
            key_scheme=CURRENT_SCHEME,
            queue=queue,
            queue_key=key,
            priority=priority,
            dedup_id=dedup_id,
        )
        if delay is not None:
            wait = parse_duration(delay, what="delay")
            run.not_before = now + timedelta(seconds=wait) if wait > 0 else None
        if deadline is not None:
            run.deadline_at = now + timedelta(seconds=parse_duration(deadline, what="deadline"))
        host = self._host
        if queue is not None or run.not_before is not None:
            run.status = "queued"
            run.pending_pass = False
        adopt = run.status == "running" and host.room_to_adopt() > 0
        if adopt:
            # Inserted holding this process's lease: its first pass starts at once,
            # with no write to begin it.
            run.token = run.passes = 1
            run.pending_pass = False
            run.open_pass = True
            run.lease_holder = self.instance_id
            run.lease_expires_at = now + timedelta(seconds=self.config.lease_ttl)
        # A store outage is waited out, up to ``store_timeout``; then a clear error.
        existing = await host.outages.call(
            lambda: self.store.insert_run(run), timeout=self.config.store_timeout
        )
        if existing is not None:
            if existing.workflow != workflow:
                raise InvalidRunIdError(
                    f"run id {run_id!r} already belongs to a run of workflow "
                    f"{existing.workflow!r}, not {workflow!r}; choose another id"
                )
            return run_id
        await mirror_run(self.mirror, run)
        if host.serving and (run.not_before is not None or run.deadline_at is not None):
            host.run_timers.arm(run)
        if run.status == "queued":
            if run.not_before is None and queue is not None:
                host.joined_line(queue)
        elif adopt:
            host.adopt(run)
        else:
            host.kick(run_id)
        return run_id

    async def send_event(self, run_id: str, name: str, payload: Any = None) -> None:
        """Deliver event ``name`` to the run; kept until the run waits for it."""
        run = await self._control.get(run_id)
        check_name(name, "event name")
        event = EventRecord(
            # Ordered by sending time first, so waits consume events oldest first.
            event_id=f"{time.time_ns():020d}-{uuid.uuid4().hex[:12]}",
            run_id=run.run_id,
            name=name,
            payload=to_stored(payload, f"payload of event {name!r}"),
            created_at=utcnow(),
        )
        await self.store.insert_event(event)
        await self._control.trigger(run_id)

    async def status(self, run_id: str) -> RunStatus:
        """The run's status, with each step folded to its latest attempt."""
        run = await self._control.get(run_id)
        return fold_status(run, await self.store.load_steps(run_id))

    async def history(self, run_id: str) -> list[TimelineEntry]:
        """Every attempt of every step of the run, with the time of each transition."""
        run = await self._control.get(run_id)
        return timeline(run, await self.store.load_steps(run_id))

    async def list_runs(
        self,
        workflow: str | None = None,
        status: str | None = None,
        limit: int = 50,
        after: str | None = None,
        *,
        prefix: str | None = None,
        created_since: datetime | None = None,
        created_before: datetime | None = None,
    ) -> list[RunStatus]:
        """Runs ordered by id; pass the last id seen as ``after`` for the next page.

        ``prefix`` keeps the ids that start with it (plain characters, not a pattern);
        ``created_since`` (inclusive) and ``created_before`` (exclusive) bound the
        creation time (timezone-aware datetimes)."""
        if after is not None:
            check_run_id(after)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST:
            raise InvalidLimitError(f"limit must be an integer from 1 to {MAX_LIST}, not {limit!r}")
        if prefix is not None:
            if not isinstance(prefix, str) or len(prefix) > MAX_RUN_ID_LENGTH:
                raise InvalidRunIdError(
                    f"a run id prefix is a string of at most {MAX_RUN_ID_LENGTH} characters"
                )
            prefix = prefix or None
        for name, moment in (("created_since", created_since), ("created_before", created_before)):
            if moment is not None and (not isinstance(moment, datetime) or moment.tzinfo is None):
                raise ValueError(f"{name} must be a timezone-aware datetime, not {moment!r}")
        runs = await self.store.list_runs(
            workflow=workflow,
            status=status,
            limit=limit,
            after=after,
            prefix=prefix,
            created_since=created_since,
            created_before=created_before,
        )
        return [fold_status(r, []) for r in runs]

    async def result(self, run_id: str, timeout: float | None = None) -> Any:
        """Wait for the run to end and return its output.

        Raises WorkflowRunFailedError or WorkflowRunCancelledError for a run that did not
        complete, and TimeoutError past ``timeout`` seconds.
        """
        check_run_id(run_id)
        try:
            run = await self._host.waiters.wait(run_id, timeout)
        except TimeoutError:
            now = await self._control.get(run_id)
            if now.status not in TERMINAL:
                raise TimeoutError(
                    f"run {run_id!r} is still {now.status} after {timeout} s"
                ) from None
            run = now
        return _outcome(run)

    async def cancel(self, run_id: str, *, compensate: bool = False) -> None:
        """Stop the run for good; with ``compensate`` its compensations run first."""
        await self._control.cancel(run_id, compensate=compensate)

    async def suspend(self, run_id: str) -> None:
        """Pause the run: no new step of it starts until :meth:`resume`."""
        await self._control.suspend(run_id)

    async def resume(self, run_id: str) -> None:
        """Set a suspended run running again and give it a pass."""
        await self._control.resume(run_id)

    async def retry(self, run_id: str) -> None:
        """Give a ``failed`` run a new pass from the step that failed it.

        That step gets one more attempt (a dispatched one goes back on the queue); the
        steps that succeeded keep their results. Raises ValueError for a run that is not
        ``failed``.
        """
        await self._control.retry(run_id)

    async def delete_finished_runs(self, older_than: Duration, *, batch: int = 500) -> int:
        """Delete terminal runs last updated more than ``older_than`` ago, with their steps
        and events; runs that are not terminal are never touched. Returns the count."""
        age = parse_duration(older_than, what="older_than")
        cutoff = utcnow() - timedelta(seconds=age)
        total = 0
        while True:
            deleted = await self.store.delete_runs(finished_before=cutoff, limit=batch)
            total += deleted
            if deleted < batch:
                return total

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

    # ---- schedules ---------------------------------------------------------------

    async def create_schedule(
        self,
        name: str,
        workflow: str,
        *,
        cron: str | None = None,
        every: Duration | None = None,
        timezone: str = "UTC",
        input: Any = None,
    ) -> Schedule:
        """Store a schedule that starts ``workflow`` with ``input`` at every fire: of
        ``cron`` (read in ``timezone``) or ``every`` (whole seconds, at the multiples of
        the interval since the Unix epoch). Replaces a schedule of the same name (the
        new one is not paused). Each fire starts one run across the fleet, with run id
        ``"{name}@{fire time, UTC, e.g. 2026-12-03T01:00:00Z}"``, in a serving process
        that registered ``workflow``.

        Raises :class:`WorkflowNotRegisteredError` for a workflow not registered on this
        engine and :class:`InvalidScheduleError` for an unusable timing."""
        check_name(name, "schedule name")
        if len(name) + RUN_ID_SUFFIX_LENGTH > MAX_RUN_ID_LENGTH:
            raise InvalidNameError(
                f"a schedule name must be at most {MAX_RUN_ID_LENGTH - RUN_ID_SUFFIX_LENGTH} "
                f"characters (its run ids add {RUN_ID_SUFFIX_LENGTH}), got {len(name)}"
            )
        check_name(workflow, "workflow name")
        registered = self._host.workflows
        if workflow not in registered:
            raise WorkflowNotRegisteredError(
                f"no workflow named {workflow!r} is registered on this engine "
                f"(registered: {sorted(registered) or 'none'})"
            )
        spec = make_spec(cron, every, timezone)
        stored = to_stored(input, f"input of schedule {name!r}")
        now = utcnow()
        existing = await self.store.get_schedule(name)
        record = ScheduleRecord(
            name=name,
            workflow=workflow,
            cron=spec.cron,
            every=spec.every,
            timezone=spec.timezone,
            input=stored,
            paused=False,
            next_fire_at=next_fire(spec, now),
            created_at=existing.created_at if existing is not None else now,
            updated_at=now,
        )
        await self.store.put_schedule(record)
        self._host.schedules_changed()
        return _schedule(record)

    async def pause_schedule(self, name: str) -> None:
        """Stop the schedule firing until :meth:`resume_schedule`."""
        check_name(name, "schedule name")
        if await self.store.set_schedule_paused(name, True, updated_at=utcnow()) is None:
            raise ScheduleNotFoundError(f"no schedule is named {name!r}")

    async def resume_schedule(self, name: str) -> None:
        """Let a paused schedule fire again, from its next fire after now (the fires
        it missed while paused are not made up)."""
        check_name(name, "schedule name")
        found = await self.store.get_schedule(name)
        if found is None:
            raise ScheduleNotFoundError(f"no schedule is named {name!r}")
        if not found.paused:
            return
        now = utcnow()
        resumed = await self.store.set_schedule_paused(
            name, False, next_fire_at=next_fire(spec_of(found), now), updated_at=now
        )
        if resumed is None:
            raise ScheduleNotFoundError(f"no schedule is named {name!r}")
        self._host.schedules_changed()

    async def delete_schedule(self, name: str) -> None:
        """Delete the schedule; the runs it started are not touched."""
        check_name(name, "schedule name")
        if not await self.store.delete_schedule(name):
            raise ScheduleNotFoundError(f"no schedule is named {name!r}")

    async def list_schedules(self) -> list[Schedule]:
        """Every stored schedule, sorted by name (registered on this engine or not)."""
        return [_schedule(record) for record in await self.store.list_schedules()]

    async def _start_scheduled(self, workflow: str, input: Any, run_id: str) -> None:
        await self.start(workflow, input, run_id=run_id)

    # ---- operating (the dashboard) -----------------------------------------------

    async def list_queues(self) -> list[QueueStatus]:
        """The queues declared on this engine or holding runs in the store, with their
        runs counted (waiting and admitted) and the admissions of this minute and the
        last, sorted by name."""
        out = []
        declared_here = self._host.queues
        names = sorted(set(declared_here) | set(await self.store.queue_names()))
        for name in names:
            # A queue only seen in the store (a tool that did not declare it) shows no limits.
            limits = declared_here.get(name) or QueueLimits(name)
            counts = await self.store.count_queue(name)
            state = await self.store.get_queue_state(name)
            minute = int(utcnow().timestamp() // 60)
            recent = state.minutes if state is not None else []
            out.append(
                QueueStatus(
                    name=name,
                    concurrency=limits.concurrency,
                    worker_concurrency=limits.worker_concurrency,
                    key_concurrency=limits.key_concurrency,
                    rate=_rate_text(limits),
                    queued=counts.get("queued", 0),
                    active=sum(n for s, n in counts.items() if s != "queued"),
                    admitted_last_minute=sum(n for m, n in recent if m == minute - 1),
                    admitted_this_minute=sum(n for m, n in recent if m == minute),
                )
            )
        return out

    async def count_runs(self, workflow: str | None = None) -> dict[str, int]:
        """How many runs (of ``workflow``, when given) are in each status; a status with
        no run is absent."""
        if workflow is not None:
            check_name(workflow, "workflow name")
        return await self.store.count_runs(workflow=workflow)

    async def list_workflows(self) -> list[str]:
        """The names of the workflows that have runs in the store, sorted (registered
        on this engine or not)."""
        return await self.store.list_workflows()

    async def list_children(self, run_id: str) -> list[RunStatus]:
        """The child runs of the run, ordered by id (without their steps)."""
        children = await self.store.list_child_runs(check_run_id(run_id))
        return [fold_status(r, []) for r in sorted(children, key=lambda r: r.run_id)]


def _register(registry: dict[str, Any], name: str, what: str) -> Callable[[F], F]:
    check_name(name, f"{what} name")

    def register(fn: F) -> F:
        if name in registry and registry[name] is not fn:
            raise ValueError(f"a {what} named {name!r} is already registered")
        registry[name] = fn
        return fn

    return register


def _schedule(record: ScheduleRecord) -> Schedule:
    return Schedule(
        name=record.name,
        workflow=record.workflow,
        cron=record.cron,
        every=record.every,
        timezone=record.timezone,
        input=record.input,
        paused=record.paused,
        next_fire_at=record.next_fire_at,
    )


def _outcome(run: RunRecord) -> Any:
    error = run.error or {}
    message = str(error.get("message") or f"run {run.run_id!r} ended {run.status}")
    if run.status in FAILED_ENDINGS:
        raise WorkflowRunFailedError(
            f"run {run.run_id!r} ended {run.status}: {message}", run_id=run.run_id, error=run.error
        )
    if run.status == "cancelled" and error.get("type") == "WorkflowDeadlineExceededError":
        raise WorkflowDeadlineExceededError(
            f"run {run.run_id!r} was cancelled: {message}", run_id=run.run_id, error=run.error
        )
    if run.status == "cancelled":
        raise WorkflowRunCancelledError(
            f"run {run.run_id!r} was cancelled: {message}", run_id=run.run_id, error=run.error
        )
    return run.output


def _rate_text(limits: QueueLimits) -> str | None:
    rate = limits.rate
    return None if rate is None else f"{rate.count}/{rate.per:g}s"
