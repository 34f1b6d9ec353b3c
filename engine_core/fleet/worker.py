"""This process's share of the work: queue jobs (dispatched steps) and owed passes."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from typing import Any

import engine_core.common.lifecycle_log as lifecycle_log
import engine_core.metrics as metrics
from engine_core.common.clock import real_seconds
from engine_core.common.convert import declared_parameter, from_json
from engine_core.common.durations import retry_delay_seconds
from engine_core.common.runtime import Runtime, StepFn
from engine_core.common.tasks import abandon, cancel_and_wait, wait_event
from engine_core.common.values import check_fits, idempotency_key, record_limit, value_limit
from engine_core.errors import StoreUnavailableError
from engine_core.mirror import mirror_step
from engine_core.records import StepRecord
from engine_core.run.attempt import error_info, run_attempt
from engine_core.run.control import RunControl
from engine_core.run.leases import KeepAlive
from engine_core.run.step_info import StepInfo
from engine_core.run.streams import AttemptStreams, previous_heartbeat
from engine_core.run.threads import runs_in_thread
from engine_core.run.transitions import (
    Outcome,
    Transition,
    job_ended,
    job_returned,
    job_unclaimed,
    lost_message,
    write,
)
from engine_core.store import Store
from engine_core.tracing import current_workflow, run_log_context

log = logging.getLogger("engine_core")

IDLE_MIN_S = 0.005
IDLE_MAX_S = 1.0


class Worker:
    """Polls the store for due queue jobs and owed passes, backing off while idle."""

    def __init__(self, store: Store, runtime: Runtime, control: RunControl) -> None:
        self.store = store
        self.runtime = runtime
        self.control = control
        self._wake = asyncio.Event()
        # Checked at every turn: a cancellation alone can be lost (see engine_core.common.periodic).
        self._stopping = False
        self._loop_task: asyncio.Task[None] | None = None
        self._hint_task: asyncio.Task[None] | None = None
        self._update_task: asyncio.Task[None] | None = None
        self._jobs: set[asyncio.Task[None]] = set()
        self._claimed: set[tuple[str, str]] = set()
        # Attempts whose body began here and whose outcome is not recorded yet (the
        # write failed): their claims are no orphans. Left to expire, they count as lost.
        self._begun: dict[tuple[str, str], int] = {}
        self._reserved = 0
        # Jobs run here for a pass that waits for them in this process.
        self._handoff: dict[tuple[str, str], asyncio.Future[StepRecord | None]] = {}
        self._skip_until: dict[str, float] = {}
        self._polling = False

    @property
    def busy(self) -> bool:
        """Whether it polls, is about to (woken), or runs jobs now."""
        return self._polling or self._wake.is_set() or bool(self._jobs)

    def wake(self) -> None:
        """Work may be waiting: poll now instead of at the end of the idle backoff."""
        self._wake.set()

    def start(self) -> None:
        """Start polling for jobs of the step functions this process serves and for
        passes owed to runs of its workflows (and watching for new jobs, and for updates
        sent to runs, where the store can hint)."""
        self._loop_task = asyncio.ensure_future(self._run())
        hints = self.store.job_hints() if self.runtime.step_function_names() else None
        if hints is not None:
            self._hint_task = asyncio.ensure_future(self._follow(hints))
        updates = self.store.update_hints() if self.runtime.workflow_names() else None
        if updates is not None:
            self._update_task = asyncio.ensure_future(self._follow(updates))

    async def _follow(self, hints: AsyncIterator[None]) -> None:
        """Wake on every hint that a job was inserted, or an update sent, somewhere."""
        async for _ in hints:
            self.wake()

    async def stop(self, grace: float = 0.0) -> None:
        """Stop claiming; give running jobs ``grace`` seconds to finish, then cancel them."""
        self._stopping = True
        self._wake.set()
        await cancel_and_wait(self._loop_task, self._hint_task, self._update_task)
        if self._jobs and grace > 0:
            await asyncio.wait(list(self._jobs), timeout=grace)
        await abandon(self._jobs, "dispatched steps")

    async def _run(self) -> None:
        idle = IDLE_MIN_S
        outages = self.runtime.outages
        orphans_checked = False
        while not self._stopping:
            self._wake.clear()
            self._polling = True
            try:
                if not orphans_checked:
                    await self._release_orphans()
                    orphans_checked = True
                found = await self._poll_once()
                outages.back()
            except asyncio.CancelledError:
                raise
            except StoreUnavailableError as exc:
                outages.failed(exc)
                # Claims whose replies were lost in the outage may be ours: look again.
                orphans_checked = False
                found = False
            except Exception:
                log.exception("worker poll failed; backing off")
                found = False
            finally:
                self._polling = False
            if found:
                idle = IDLE_MIN_S
                await asyncio.sleep(0)
                continue
            await wait_event(self._wake, idle)
            idle = min(idle * 2, IDLE_MAX_S)

    async def _poll_once(self) -> bool:
        runtime = self.runtime
        config = runtime.config
        found = False
        functions = list(runtime.step_function_names())
        room = config.concurrency - (len(self._jobs) - len(self._handoff))
        if functions and room > 0:
            jobs = await self.store.claim_steps(
                functions, holder=runtime.instance_id, claim_ttl=config.lease_ttl, limit=room
            )
            for job in jobs:
                self._launch(job)
            found = bool(jobs)
        workflows = list(runtime.workflow_names())
        if workflows:
            now = real_seconds()
            owed = await self.store.find_runs_needing_pass(workflows, config.concurrency * 2)
            for run_id in owed:
                if self._skip_until.get(run_id, 0) > now:
                    continue
                if runtime.kick(run_id, on_taken=self._skipper(run_id)):
                    found = True
            if len(self._skip_until) > 10_000:
                self._skip_until = {k: v for k, v in self._skip_until.items() if v > now}
        return found

    def _skipper(self, run_id: str) -> Callable[[], None]:
        def skip() -> None:
            # Another process holds the run and will see the owed pass itself.
            self._skip_until[run_id] = real_seconds() + 1.0

        return skip

    async def _release_orphans(self) -> None:
        """Put back the jobs the store says this worker claimed and it is not running:
        claims that landed while their replies were lost. Costing no attempt, they never
        fail a step that never ran."""
        holder = self.runtime.instance_id
        for job in await self.store.find_claims(holder):
            where = (job.run_id, job.key)
            if where not in self._claimed and self._begun.get(where) != job.attempts:
                await write(self.store, job.run_id, job.key, job_unclaimed(job, holder))

    # ---- jobs run for a pass waiting here ----------------------------------------

    def slot(self) -> _Slot | None:
        """A place for one job of a pass waiting here (see ``Runtime.job_slot``). Such
        jobs wait for a step slot like every step; this only bounds how many passes may
        wait on jobs here at once (beyond that the queue takes them)."""
        if self._reserved + len(self._handoff) >= 4 * self.runtime.config.concurrency:
            return None
        self._reserved += 1
        return _Slot(self)

    def run_claimed(self, job: StepRecord) -> asyncio.Future[StepRecord | None]:
        """Run ``job``, inserted already claimed by this process, and hand its recorded
        outcome to the pass that waits for it."""
        waiting: asyncio.Future[StepRecord | None] = asyncio.get_running_loop().create_future()
        self._handoff[(job.run_id, job.key)] = waiting
        self._launch(job, checked=True)
        return waiting

    def _launch(self, job: StepRecord, *, checked: bool = False) -> None:
        task = asyncio.ensure_future(self._run_job(job, checked=checked))
        self._jobs.add(task)
        self._claimed.add((job.run_id, job.key))

        def done(finished: asyncio.Task[None]) -> None:
            self._jobs.discard(finished)
            self._claimed.discard((job.run_id, job.key))
            waiting = self._handoff.pop((job.run_id, job.key), None)
            if waiting is not None and not waiting.done():
                # It ended without recording an outcome for its pass: the pass parks.
                waiting.set_result(None)
            if not finished.cancelled() and finished.exception() is not None:
                log.error("job %r of run %s failed", job.key, job.run_id,
                          exc_info=finished.exception())  # fmt: skip

        task.add_done_callback(done)

    # ---- running a job -----------------------------------------------------------

    def _began(self, job: StepRecord) -> None:
        if len(self._begun) >= 10_000:  # bounded: the oldest claims expired long ago
            del self._begun[next(iter(self._begun))]
        self._begun[(job.run_id, job.key)] = job.attempts

    async def _lost_every_time(self, job: StepRecord) -> None:
        """Every attempt the job was allowed was claimed and lost with its worker: it
        fails, saying so."""
        message = lost_message(job.key, job.max_attempts, job.max_attempts)
        if job.max_attempts > 1:
            message = f"step {job.key!r} lost its worker on each of its attempts; {message}"
        where = lifecycle_log.fields(job.run_id, None, job.key, job.traceparent)
        log.warning("run %s: step %r: %s", job.run_id, job.key, message, extra=where)
        error = {"type": "WorkerLost", "message": message}
        await self._record(job, "failed", counted=job.attempts - 1, error=error)

    async def _run_job(self, job: StepRecord, *, checked: bool = False) -> None:
        """Run one claimed attempt of a dispatched step and record its outcome, fenced.
        ``checked``: the dispatching pass saw the run still running after the job was
        inserted, so the run need not be read."""
        attempt = job.attempts
        if attempt > job.max_attempts:
            await self._lost_every_time(job)
            return
        # A job run for a pass of this process has its run's log context from there.
        workflow = current_workflow(job.run_id)
        if not checked:
            workflow = await self._may_run(job)
            if workflow is None:
                return
        function = self.runtime.step_fn(job.function or "")
        assert function is not None, "claims only take jobs of registered step functions"
        started = self.runtime.clock.now()
        self._began(job)
        due = job.due_at or job.scheduled_at
        if due is not None:
            metrics.schedule_to_start("dispatched", (started - due).total_seconds())
        info = StepInfo(
            job.run_id,
            job.key,
            attempt,
            idempotency_key(job.idempotency_of or job.run_id, job.key),
            last_heartbeat=await previous_heartbeat(self.store, job.run_id, job.key, attempt),
        )
        try:
            result = await self._attempt(job, function, info, workflow)
        except Exception as exc:
            await self._attempt_failed(job, error_info(exc), started=started, workflow=workflow)
            return
        await self._record(job, "succeeded", result=result, started_at=started)

    async def _may_run(self, job: StepRecord) -> str | None:
        """The job's run's workflow if the run is still running, else None. The claim
        cannot see the run: a job inserted while a cancel or suspend was on its way may
        be claimable for a moment. Whatever started after a stop returned reads it here;
        the job goes back on the queue, halted, costing no attempt."""
        run = await self.store.get_run(job.run_id)
        if run is not None and run.status == "running":
            return run.workflow
        # Both through an outage: a job left halted on a run that a resume put back to
        # running would be taken by no worker.
        back = job_returned(job, self.runtime.instance_id)
        outages = self.runtime.outages
        await outages.call(lambda: write(self.store, job.run_id, job.key, back))
        await outages.call(lambda: self.control.reconcile_halt(job.run_id))
        return None

    async def _attempt(
        self, job: StepRecord, function: StepFn, info: StepInfo, workflow: str | None
    ) -> Any:
        """Run the attempt ``info`` of the job (of a run of ``workflow``, when known),
        keeping its claim alive meanwhile; its result as it will be stored."""

        async def renew() -> bool:
            return await self.store.extend_claim(
                job.run_id,
                job.key,
                holder=self.runtime.instance_id,
                attempt=info.attempt,
                claim_ttl=self.runtime.config.lease_ttl,
            )

        attributes = {
            "workflow.run_id": job.run_id,
            "workflow.step": job.key,
            "workflow.attempt": info.attempt,
            "workflow.function": job.function or "",
        }
        async with KeepAlive(
            renew,
            self.runtime.config.lease_ttl,
            f"the claim on step {job.key!r} of run {job.run_id}",
            lifecycle_log.fields(job.run_id, workflow, job.key, job.traceparent),
        ):
            with run_log_context(job.run_id, job.traceparent, workflow):
                result = await run_attempt(
                    info,
                    lambda: function(from_json(job.payload, declared_parameter(function, 0))),
                    threaded=runs_in_thread(function),
                    hooks=AttemptStreams(self.store, self.runtime.clock, renew),
                    slots=self.runtime.slots,
                    timeout=job.timeout,
                    traceparent=job.traceparent,
                    attributes=attributes,
                    limit=value_limit(self.store),
                )
                what = f"result of step {job.key!r}"
                check_fits(what, job.payload, result, limit=record_limit(self.store))
        return result

    async def _attempt_failed(
        self,
        job: StepRecord,
        error: dict[str, Any],
        *,
        started: datetime,
        workflow: str | None = None,
    ) -> None:
        """Record a failed attempt: scheduled again after its retry delay while it has
        attempts left (a timer here wakes the worker then), else failed for good."""
        attempt = job.attempts
        if attempt >= job.max_attempts:
            await self._record(job, "failed", error=error, started_at=started)
            return
        wait = retry_delay_seconds(job.retry_delay or 0, attempt, random.random())
        lifecycle_log.attempt_will_retry(
            job.run_id, workflow, job.key, job.traceparent, attempt, job.max_attempts, error, wait
        )
        due = self.runtime.clock.now() + timedelta(seconds=wait)
        if await self._record(job, "scheduled", error=error, due_at=due, started_at=started):
            self.runtime.arm_work_timer(due)

    async def _record(self, job: StepRecord, status: Outcome, **fields: Any) -> bool:
        """Write the job's outcome (fenced by its claim); hand it to its pass when one
        waits for it here, else tell the run."""
        waiting = self._handoff.get((job.run_id, job.key))
        told = waiting is not None and not waiting.done()
        now = self.runtime.clock.now()
        transition = job_ended(job, self.runtime.instance_id, status, told=told, now=now, **fields)
        outages = self.runtime.outages
        if not await self._write_through_outage(job, transition):
            log.warning(
                "run %s: step %r attempt %d lost its claim; outcome dropped",
                job.run_id,
                job.key,
                job.attempts,
            )
            return False
        self._begun.pop((job.run_id, job.key), None)
        recorded = transition.apply(_copy(job))
        await mirror_step(self.runtime.mirror, recorded)
        handed = False
        if told and waiting is not None:
            self._handoff.pop((job.run_id, job.key), None)
            # The pass may have stopped waiting while the write was on its way (its
            # lease lost in an outage): then the run must be told like any other.
            if not waiting.done():
                waiting.set_result(recorded)
                handed = True
        if not handed and status != "scheduled":
            await outages.call(lambda: self.control.notify_run(job.run_id, job.key))
        return True

    async def _write_through_outage(self, job: StepRecord, transition: Transition) -> bool:
        """``write`` the job's outcome, again and again while the store is away. A try
        that the outage cut off may have landed: sent again, the write then finds its
        own first try's change and its guard failed. The step's history tells (the
        outcome's attempt entry is unique to this transition)."""
        tries = 0

        async def once() -> bool:
            nonlocal tries
            tries += 1
            return await write(self.store, job.run_id, job.key, transition)

        outages = self.runtime.outages
        if await outages.call(once):
            return True
        if tries == 1 or transition.entry is None:
            return False
        step = await outages.call(lambda: self.store.get_step(job.run_id, job.key))
        return step is not None and transition.entry in step.history


class _Slot:
    """A place kept in the worker for one job (see :meth:`Worker.slot`)."""

    def __init__(self, worker: Worker) -> None:
        self._worker: Worker | None = worker
        self._held: tuple[str, str] | None = None

    def hold(self, job: StepRecord) -> None:
        # From before its claimed insert: the worker must not take it for an orphan.
        """Keep ``job`` (inserted by its dispatching pass, claimed by this process) from
        being taken for an orphan."""
        assert self._worker is not None
        self._held = (job.run_id, job.key)
        self._worker._claimed.add(self._held)

    def run(self, job: StepRecord) -> asyncio.Future[StepRecord | None]:
        """Run the claimed ``job`` in this slot; its outcome, handed to the waiting pass."""
        worker = self._take()
        return worker.run_claimed(job)

    def release(self) -> None:
        """Give the slot back unused."""
        if self._worker is not None:
            worker = self._take()
            if self._held is not None:
                worker._claimed.discard(self._held)

    def _take(self) -> Worker:
        worker, self._worker = self._worker, None
        assert worker is not None, "a job slot is used once"
        worker._reserved -= 1
        return worker


def _copy(step: StepRecord) -> StepRecord:
    twin = object.__new__(StepRecord)
    twin.__dict__.update(step.__dict__)
    twin.history = list(step.history)
    return twin
