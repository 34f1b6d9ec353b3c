"""``Engine``: registers workflows and step functions, starts and steers runs.

Outside ``async with engine`` it is a client (start, send events, read, cancel, suspend,
resume). Inside, it is also a worker: it runs passes, claims dispatched steps, fires
timers and runs recovery.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import replace
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, TypeVar

from engine_core.durations import Duration, parse_duration
from engine_core.errors import (
    InvalidRunIdError,
    RunNotFoundError,
    WorkflowNotRegisteredError,
    WorkflowRunCancelledError,
    WorkflowRunFailedError,
)
from engine_core.mirror import RunMirror, mirror_run, mirror_step
from engine_core.records import (
    FAILED_ENDINGS,
    TERMINAL,
    AttemptEntry,
    EventRecord,
    RunRecord,
    RunState,
    StepGuard,
    StepRecord,
    utcnow,
)
from engine_core.run_pass import PassEnd, RunPass
from engine_core.status import RunStatus, TimelineEntry, fold_status, timeline
from engine_core.store import Store
from engine_core.tracing import new_run_traceparent
from engine_core.values import MAX_RUN_ID_LENGTH, check_name, check_run_id, to_stored

log = logging.getLogger("engine_core")

WorkflowFn = Callable[[Any, Any], Awaitable[Any]]
StepFn = Callable[[Any], Awaitable[Any]]
F = TypeVar("F", bound=Callable[..., Any])

_ACTIVE: tuple[RunState, ...] = ("running", "compensating")


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
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be a positive integer, not {concurrency!r}")
        self.store = store
        self.lease_ttl = parse_duration(lease_ttl, what="lease_ttl")
        if self.lease_ttl <= 0:
            raise ValueError("lease_ttl must be longer than zero")
        self.recovery_interval = parse_duration(recovery_interval, what="recovery_interval")
        self.stalled_after = parse_duration(stalled_after, what="stalled_after")
        self.undispatched_after = parse_duration(undispatched_after, what="undispatched_after")
        self.concurrency = concurrency
        self.mirror = mirror
        self.instance_id = uuid.uuid4().hex
        self._workflows: dict[str, WorkflowFn] = {}
        self._step_functions: dict[str, StepFn] = {}
        self._slots = asyncio.Semaphore(concurrency)
        # Passes in flight, bounded too: hundreds of passes started at once would each
        # take a lease whose clock runs while they queue for the store.
        self._pass_slots = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._driving: set[str] = set()
        self._timers: dict[tuple[str, datetime], asyncio.TimerHandle] = {}
        self._settled = asyncio.Event()
        self._work = asyncio.Event()
        self._serving = False
        self._closing = False
        # How long leaving ``async with`` waits for running steps before cancelling them.
        self.shutdown_grace = min(self.lease_ttl, 30.0)
        self._worker: Any = None
        self._recovery: Any = None

    # ---- registration ------------------------------------------------------------

    def workflow(self, name: str) -> Callable[[F], F]:
        """Register ``async def fn(ctx, input)`` as the workflow ``name``."""
        check_name(name, "workflow name")

        def register(fn: F) -> F:
            if name in self._workflows and self._workflows[name] is not fn:
                raise ValueError(f"a workflow named {name!r} is already registered")
            self._workflows[name] = fn
            return fn

        return register

    def step_function(self, name: str) -> Callable[[F], F]:
        """Register ``async def fn(payload)`` as a step function any worker may run."""
        check_name(name, "step function name")

        def register(fn: F) -> F:
            if name in self._step_functions and self._step_functions[name] is not fn:
                raise ValueError(f"a step function named {name!r} is already registered")
            self._step_functions[name] = fn
            return fn

        return register

    # ---- lifecycle ---------------------------------------------------------------

    async def __aenter__(self) -> Engine:
        from engine_core.recovery import WorkflowRecovery
        from engine_core.worker import Worker

        await self.store.init()
        self._serving = True
        self._worker = Worker(self)
        self._recovery = WorkflowRecovery(self)
        self._worker.start()
        self._recovery.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Graceful: claim and start nothing new, let the steps running now record their
        # outcomes (a pass stops at its next step boundary and leaves the run owed to
        # the fleet), and only then cancel what is left. A cancelled step would cost an
        # attempt when another process takes it back.
        self._serving = False
        self._closing = True
        if self._recovery is not None:
            await self._recovery.stop()
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        try:
            if self._worker is not None:
                await self._worker.stop(grace=self.shutdown_grace)
            if self._tasks:
                await asyncio.wait(list(self._tasks), timeout=self.shutdown_grace)
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            self._closing = False

    @property
    def serving(self) -> bool:
        """Whether this engine runs work (inside ``async with``)."""
        return self._serving

    def _spawn(self, coro: Coroutine[Any, Any, Any], what: str) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.error("%s failed", what, exc_info=t.exception())

        task.add_done_callback(done)

    # ---- the public API ----------------------------------------------------------

    async def start(self, workflow: str, input: Any = None, *, run_id: str | None = None) -> str:
        """Record a run of ``workflow`` and return its id; the run proceeds in the background.

        With a ``run_id`` that exists, returns it and starts nothing.
        """
        if workflow not in self._workflows:
            raise WorkflowNotRegisteredError(
                f"no workflow named {workflow!r} is registered on this engine "
                f"(registered: {sorted(self._workflows) or 'none'})"
            )
        run_id = check_run_id(run_id) if run_id is not None else uuid.uuid4().hex
        now = utcnow()
        run = RunRecord(
            run_id=run_id,
            workflow=workflow,
            status="running",
            input=to_stored(input, f"input of workflow {workflow!r}"),
            created_at=now,
            updated_at=now,
            wire={"traceparent": new_run_traceparent(), "started_by": self.instance_id},
        )
        existing = await self.store.insert_run(run)
        if existing is not None:
            if existing.workflow != workflow:
                raise InvalidRunIdError(
                    f"run id {run_id!r} already belongs to a run of workflow "
                    f"{existing.workflow!r}, not {workflow!r}; choose another id"
                )
            return run_id
        await mirror_run(self.mirror, run)
        self._kick_local(run_id)
        return run_id

    async def send_event(self, run_id: str, name: str, payload: Any = None) -> None:
        """Deliver event ``name`` to the run; kept until the run waits for it."""
        run = await self._get(run_id)
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
        await self.trigger(run_id)

    async def status(self, run_id: str) -> RunStatus:
        """The run's status, with each step folded to its latest attempt."""
        run = await self._get(run_id)
        return fold_status(run, await self.store.load_steps(run_id))

    async def history(self, run_id: str) -> list[TimelineEntry]:
        """Every attempt of every step of the run, with the time of each transition."""
        run = await self._get(run_id)
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
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        delay = 0.002
        while True:
            run = await self._get(run_id)
            if run.status in TERMINAL:
                return _outcome(run)
            wait = delay
            if deadline is not None:
                left = deadline - loop.time()
                if left <= 0:
                    raise TimeoutError(f"run {run_id!r} is still {run.status} after {timeout} s")
                wait = min(wait, left)
            settled = self._settled
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(settled.wait(), wait)
            delay = min(delay * 2, 0.25)

    async def cancel(self, run_id: str, *, compensate: bool = False) -> None:
        """Stop the run for good; with ``compensate`` its compensations run first."""
        run = await self._get(run_id)
        target: RunState = "compensating" if compensate else "cancelled"
        error = {
            "type": "WorkflowRunCancelledError",
            "message": f"run {run_id!r} was cancelled",
        }
        updated = await self.store.set_run_status(
            run.run_id,
            target,
            expect=("running", "suspended"),
            error=error,
            request_pass=compensate,
        )
        if updated is None:
            return
        await mirror_run(self.mirror, updated)
        await self.store.halt_steps(run_id, True)
        for child in await self.store.list_child_runs(run_id):
            if child.status not in TERMINAL:
                await self.cancel(child.run_id, compensate=compensate)
        if compensate:
            self._kick_local(run_id)
        else:
            await self._run_ended(updated, "cancelled", None, error)

    async def suspend(self, run_id: str) -> None:
        """Pause the run: no new step of it starts until :meth:`resume`."""
        run = await self._get(run_id)
        updated = await self.store.set_run_status(run.run_id, "suspended", expect=("running",))
        if updated is not None:
            await mirror_run(self.mirror, updated)
            await self.store.halt_steps(run_id, True)
            # A resume that raced us may have unhalted before our halt landed.
            latest = await self.store.get_run(run_id)
            if latest is not None and latest.status == "running":
                await self.store.halt_steps(run_id, False)

    async def resume(self, run_id: str) -> None:
        """Set a suspended run running again and give it a pass."""
        run = await self._get(run_id)
        updated = await self.store.set_run_status(
            run.run_id, "running", expect=("suspended",), request_pass=True
        )
        if updated is not None:
            await mirror_run(self.mirror, updated)
            await self.store.halt_steps(run_id, False)
            self._kick_local(run_id)
            self._work_arrived()

    async def retry(self, run_id: str) -> None:
        """Give a ``failed`` run a new pass from the step that failed it.

        That step gets one more attempt (a dispatched one goes back on the queue); the
        steps that succeeded keep their results. Raises ValueError for a run that is not
        ``failed``.
        """
        run = await self._get(run_id)
        if run.status != "failed":
            raise ValueError(f"run {run_id!r} is {run.status}; only a failed run can be retried")
        failed_step = (run.error or {}).get("step")
        if isinstance(failed_step, str):
            step = await self.store.get_step(run_id, failed_step)
            if step is not None and step.status == "failed":
                now = utcnow()
                changes: dict[str, Any] = {"updated_at": now, "max_attempts": step.attempts + 1}
                if step.kind == "dispatch":
                    changes.update(status="scheduled", due_at=now, halted=False)
                else:
                    changes.update(status="pending")
                await self.store.update_step(
                    run_id, failed_step, guard=StepGuard(status_in=("failed",)), changes=changes
                )
        updated = await self.store.set_run_status(
            run_id, "running", expect=("failed",), request_pass=True
        )
        if updated is not None:
            await mirror_run(self.mirror, updated)
            self._kick_local(run_id)

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

    async def recover(self, *, startup: bool = False) -> Any:
        """Run one recovery pass now and return its report."""
        from engine_core.recovery import WorkflowRecovery

        recovery = self._recovery or WorkflowRecovery(self)
        return await recovery.recover(startup=startup)

    # ---- driving runs ------------------------------------------------------------

    async def _get(self, run_id: str) -> RunRecord:
        run = await self.store.get_run(check_run_id(run_id))
        if run is None:
            raise RunNotFoundError(f"no run has id {run_id!r}")
        return run

    async def trigger(self, run_id: str) -> None:
        """Note that the run is owed a pass and, when serving, try to give it one here."""
        await self.store.request_pass(run_id)
        self._kick_local(run_id)

    async def notify_run(self, run_id: str, step: str) -> None:
        """Tell a run that its step settled outside its passes, then mark the step told.

        The step is written ``notified=False`` first, so a crash between the two leaves
        a trace that recovery finds and repairs.
        """
        await self.trigger(run_id)
        await self.store.update_step(run_id, step, guard=StepGuard(), changes={"notified": True})

    def _kick_local(self, run_id: str) -> None:
        if self._serving:
            self._spawn_drive(run_id)
        else:
            self._work_arrived()

    def _spawn_drive(self, run_id: str, on_taken: Callable[[], None] | None = None) -> bool:
        """Drive the run in the background unless this process already drives it."""
        if run_id in self._driving:
            return False
        self._driving.add(run_id)  # at once, so a second kick before the task runs is a no-op

        async def go() -> None:
            try:
                if not await self._drive_passes(run_id) and on_taken is not None:
                    on_taken()
            finally:
                self._driving.discard(run_id)

        self._spawn(go(), f"pass of run {run_id}")
        return True

    def _work_arrived(self) -> None:
        self._work.set()

    async def drive(self, run_id: str) -> bool:
        """Give the run passes here, while it is owed them; False if another process holds
        it. (Workers call this; it runs the workflow in this process even as a client.)"""
        if run_id in self._driving:
            return True
        self._driving.add(run_id)
        try:
            return await self._drive_passes(run_id)
        finally:
            self._driving.discard(run_id)

    async def _drive_passes(self, run_id: str) -> bool:
        async with self._pass_slots:
            return await self._drive_passes_now(run_id)

    async def _drive_passes_now(self, run_id: str) -> bool:
        while True:
            lease = await self.store.acquire_lease(
                f"run:{run_id}", self.instance_id, self.lease_ttl
            )
            if lease is None:
                return False
            end: PassEnd | None = None
            keeper = asyncio.ensure_future(self._keep_lease(lease))
            try:
                run = await self.store.begin_pass(run_id)
                if run is None or run.status not in _ACTIVE:
                    return True
                if run.workflow not in self._workflows:
                    # Not ours to run: leave the pass owed for an engine that has it.
                    await self.store.request_pass(run_id)
                    return True
                steps = await self.store.load_steps(run_id) if run.passes > 1 else []
                end = await RunPass(self, run, lease, steps).execute()
            finally:
                keeper.cancel()
                await self.store.release_lease(lease)
            if end == "requeued":
                # This process is shutting down: the run is owed to the fleet.
                await self.store.request_pass(run_id)
                return True
            if end not in ("parked", "stopped"):
                return True
            # A trigger that came while we held the lease found it taken and left
            # the pass owed to us; it is only visible now that the lease is free.
            again = await self.store.get_run(run_id)
            if again is None or not again.pending_pass or again.status not in _ACTIVE:
                return True

    async def _keep_lease(self, lease: Any) -> None:
        while True:
            await asyncio.sleep(self.lease_ttl / 3)
            renewed = await self.store.refresh_lease(lease, self.lease_ttl)
            if renewed is None:
                log.warning("lost the lease %s; the pass will be fenced out", lease.key)
                return

    def _arm_timer(self, run_id: str, due_at: datetime) -> None:
        """Trigger the run when ``due_at`` arrives (in this process, while serving)."""
        if not self._serving or (run_id, due_at) in self._timers:
            return
        delay = max(0.0, (due_at - utcnow()).total_seconds())
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._timers.pop((run_id, due_at), None)
            if self._serving:
                self._spawn(self.trigger(run_id), f"wake-up of run {run_id}")

        self._timers[(run_id, due_at)] = loop.call_later(delay, fire)

    async def _run_ended(
        self, run: RunRecord, status: RunState, output: Any, error: dict[str, Any] | None
    ) -> None:
        """After a run moved to ``status`` in the store: mirror it; when terminal, settle its
        parent's step and wake local waiters."""
        if self.mirror is not None:
            ended = replace(run, status=status, output=output, error=error, inflight={})
            await mirror_run(self.mirror, ended)
        self._settled.set()
        self._settled = asyncio.Event()
        if run.parent_run_id is None or run.parent_step is None or status not in TERMINAL:
            return
        await self._settle_parent_step(
            run.parent_run_id, run.parent_step, run.run_id, status, output, error
        )

    async def _settle_parent_step(
        self,
        parent_id: str,
        parent_step: str,
        child_id: str,
        status: str,
        output: Any,
        error: dict[str, Any] | None,
    ) -> StepRecord | None:
        now = utcnow()
        changes: dict[str, Any] = {
            "attempts": 1,
            "updated_at": now,
            "ended_at": now,
            "notified": False,  # until the parent is told, below
        }
        if status == "completed":
            changes.update(status="succeeded", result=output, error=None)
        else:
            kind = (
                "WorkflowRunCancelledError" if status == "cancelled" else "WorkflowRunFailedError"
            )
            message = (error or {}).get("message") or f"child run {child_id!r} ended {status}"
            changes.update(status="failed", error={"type": kind, "message": message})
        landed = await self.store.update_step(
            parent_id,
            parent_step,
            guard=StepGuard(status_in=("scheduled",)),
            changes=changes,
            entry=AttemptEntry(
                attempt=1, status=changes["status"], at=now, error=changes.get("error")
            ),
        )
        if landed:
            await self.notify_run(parent_id, parent_step)
        settled = await self.store.get_step(parent_id, parent_step)
        if landed and settled is not None:
            await mirror_step(self.mirror, settled)
        return settled

    def _child_run_id(self, parent_id: str, key: str) -> str:
        candidate = f"{parent_id}:{key}"
        if len(candidate) <= 200:
            return candidate
        return f"child-{uuid.uuid5(uuid.NAMESPACE_URL, candidate).hex}"

    async def _start_child(
        self, parent: RunRecord, key: str, child_id: str, workflow: str, input: Any
    ) -> None:
        now = utcnow()
        child = RunRecord(
            run_id=child_id,
            workflow=workflow,
            status="running",
            input=input,
            created_at=now,
            updated_at=now,
            parent_run_id=parent.run_id,
            parent_step=key,
            wire={"traceparent": parent.wire.get("traceparent"), "started_by": self.instance_id},
        )
        if await self.store.insert_run(child) is None:
            # A cancel of the parent that listed its children before this one existed
            # must still reach it: the parent's status was written before that listing.
            latest = await self.store.get_run(parent.run_id)
            if latest is not None and latest.status in ("cancelled", "compensating"):
                await self.cancel(child_id, compensate=latest.status == "compensating")
                return
            self._kick_local(child_id)

    async def _reconcile_child(self, parent: RunRecord, step: StepRecord) -> StepRecord | None:
        """Settle a child step whose child ended unnoticed; recreate a lost child."""
        assert step.child_run_id is not None
        child = await self.store.get_run(step.child_run_id)
        if child is None:
            await self._start_child(
                parent, step.key, step.child_run_id, step.function or "", step.payload
            )
            return None
        if child.status not in TERMINAL:
            return None
        settled = await self._settle_parent_step(
            parent.run_id, step.key, child.run_id, child.status, child.output, child.error
        )
        if settled is not None and settled.status in ("succeeded", "failed"):
            return settled
        return None

    def _arm_timer_work(self, due_at: datetime) -> None:
        """Wake this process's worker when a queue job becomes due."""
        if self._serving:
            delay = max(0.0, (due_at - utcnow()).total_seconds())
            asyncio.get_running_loop().call_later(delay, self._work.set)

    # ---- operating (the dashboard) -----------------------------------------------

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


def _outcome(run: RunRecord) -> Any:
    error = run.error or {}
    message = str(error.get("message") or f"run {run.run_id!r} ended {run.status}")
    if run.status in FAILED_ENDINGS:
        raise WorkflowRunFailedError(
            f"run {run.run_id!r} ended {run.status}: {message}", run_id=run.run_id, error=run.error
        )
    if run.status == "cancelled":
        raise WorkflowRunCancelledError(
            f"run {run.run_id!r} was cancelled: {message}", run_id=run.run_id, error=run.error
        )
    return run.output
