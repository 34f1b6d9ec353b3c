"""This process's share of the work: queue jobs (dispatched steps) and owed passes."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from datetime import timedelta

from engine_core.attempt import error_info, run_attempt
from engine_core.context import StepInfo
from engine_core.control import RunControl
from engine_core.durations import retry_delay_seconds
from engine_core.leases import KeepAlive
from engine_core.mirror import mirror_step
from engine_core.records import StepRecord, utcnow
from engine_core.runtime import Runtime
from engine_core.store import Store
from engine_core.tasks import cancel_and_wait, wait_event
from engine_core.tracing import run_log_context
from engine_core.transitions import Transition, job_ended, job_returned, write
from engine_core.values import idempotency_key

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
        self._loop_task: asyncio.Task[None] | None = None
        self._jobs: set[asyncio.Task[None]] = set()
        self._skip_until: dict[str, float] = {}

    def wake(self) -> None:
        """Work may be waiting: poll now instead of at the end of the idle backoff."""
        self._wake.set()

    def start(self) -> None:
        self._loop_task = asyncio.ensure_future(self._run())

    async def stop(self, grace: float = 0.0) -> None:
        """Stop claiming; give running jobs ``grace`` seconds to finish, then cancel them."""
        await cancel_and_wait(self._loop_task)
        if self._jobs and grace > 0:
            await asyncio.wait(list(self._jobs), timeout=grace)
        for job in list(self._jobs):
            job.cancel()
        await asyncio.gather(*self._jobs, return_exceptions=True)

    async def _run(self) -> None:
        idle = IDLE_MIN_S
        while True:
            self._wake.clear()
            try:
                found = await self._poll_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("worker poll failed; backing off")
                found = False
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
        while functions and len(self._jobs) < config.concurrency:
            job = await self.store.claim_step(
                functions, holder=runtime.instance_id, claim_ttl=config.lease_ttl
            )
            if job is None:
                break
            found = True
            task = asyncio.ensure_future(self._run_job(job))
            self._jobs.add(task)
            task.add_done_callback(self._jobs.discard)
        workflows = list(runtime.workflow_names())
        if workflows:
            now = asyncio.get_running_loop().time()
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
            self._skip_until[run_id] = asyncio.get_running_loop().time() + 1.0

        return skip

    async def _run_job(self, job: StepRecord) -> None:
        """Run one claimed attempt of a dispatched step and record its outcome, fenced."""
        holder = self.runtime.instance_id
        attempt = job.attempts
        if attempt > job.max_attempts:
            # Every attempt it was allowed was claimed and lost with its worker.
            error = {
                "type": "WorkerLost",
                "message": f"step {job.key!r} lost its worker on each of its "
                f"{job.max_attempts} attempt(s)",
            }
            lost = job_ended(job, holder, "failed", counted=attempt - 1, error=error)
            await self._record(job, lost)
            return
        # The claim cannot see the run: a job inserted while a cancel or suspend was on
        # its way may be claimable for a moment. Whatever started after a stop returned
        # reads it here; the job goes back on the queue, halted, costing no attempt.
        run = await self.store.get_run(job.run_id)
        if run is None or run.status != "running":
            await write(self.store, job.run_id, job.key, job_returned(job, holder))
            await self.control.reconcile_halt(job.run_id)
            return
        function = self.runtime.step_fn(job.function or "")
        assert function is not None, "claims only take jobs of registered step functions"
        info = StepInfo(job.run_id, job.key, attempt, idempotency_key(job.run_id, job.key))
        attributes = {
            "workflow.run_id": job.run_id,
            "workflow.step": job.key,
            "workflow.attempt": attempt,
            "workflow.function": job.function or "",
        }
        started = utcnow()

        async def renew() -> bool:
            return await self.store.extend_claim(
                job.run_id,
                job.key,
                holder=holder,
                attempt=attempt,
                claim_ttl=self.runtime.config.lease_ttl,
            )

        try:
            async with KeepAlive(
                renew, self.runtime.config.lease_ttl, f"the claim on step {job.key!r}"
            ):
                with run_log_context(job.run_id, job.traceparent):
                    result = await run_attempt(
                        info,
                        lambda: function(job.payload),
                        slots=self.runtime.slots,
                        timeout=job.timeout,
                        traceparent=job.traceparent,
                        attributes=attributes,
                    )
        except Exception as exc:
            error = error_info(exc)
            if attempt < job.max_attempts:
                wait = retry_delay_seconds(job.retry_delay or 0, attempt, random.random())
                due = utcnow() + timedelta(seconds=wait)
                retry = job_ended(
                    job, holder, "scheduled", error=error, due_at=due, started_at=started
                )
                if await self._record(job, retry, tell=False):
                    self.runtime.arm_work_timer(due)
                return
            failed = job_ended(job, holder, "failed", error=error, started_at=started)
            await self._record(job, failed)
            return
        done = job_ended(job, holder, "succeeded", result=result, started_at=started)
        await self._record(job, done)

    async def _record(self, job: StepRecord, transition: Transition, *, tell: bool = True) -> bool:
        if not await write(self.store, job.run_id, job.key, transition):
            log.warning(
                "run %s: step %r attempt %d lost its claim; outcome dropped",
                job.run_id,
                job.key,
                job.attempts,
            )
            return False
        if self.runtime.mirror is not None:
            recorded = await self.store.get_step(job.run_id, job.key)
            if recorded is not None:
                await mirror_step(self.runtime.mirror, recorded)
        if tell:
            await self.control.notify_run(job.run_id, job.key)
        return True
