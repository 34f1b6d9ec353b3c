"""This process's share of the work: queue jobs (dispatched steps) and owed passes."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import random
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from engine_core.context import StepInfo, _current_step
from engine_core.durations import retry_delay_seconds
from engine_core.mirror import mirror_step
from engine_core.records import AttemptEntry, StepGuard, StepRecord, utcnow
from engine_core.run_pass import error_info
from engine_core.tracing import attempt_span, record_failure, run_log_context
from engine_core.values import idempotency_key, to_stored

if TYPE_CHECKING:
    from engine_core.engine import Engine

log = logging.getLogger("engine_core")

IDLE_MIN_S = 0.005
IDLE_MAX_S = 1.0


class Worker:
    """Polls the store for due queue jobs and owed passes, backing off while idle."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._loop_task: asyncio.Task[None] | None = None
        self._jobs: set[asyncio.Task[None]] = set()
        self._skip_until: dict[str, float] = {}

    def start(self) -> None:
        self._loop_task = asyncio.ensure_future(self._run())

    async def stop(self, grace: float = 0.0) -> None:
        """Stop claiming; give running jobs ``grace`` seconds to finish, then cancel them."""
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
        if self._jobs and grace > 0:
            await asyncio.wait(list(self._jobs), timeout=grace)
        for job in list(self._jobs):
            job.cancel()
        await asyncio.gather(*self._jobs, return_exceptions=True)

    async def _run(self) -> None:
        engine = self.engine
        idle = IDLE_MIN_S
        while True:
            engine._work.clear()
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
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(engine._work.wait(), idle)
            idle = min(idle * 2, IDLE_MAX_S)

    async def _poll_once(self) -> bool:
        engine = self.engine
        found = False
        functions = list(engine._step_functions)
        while functions and len(self._jobs) < engine.concurrency:
            job = await engine.store.claim_step(
                functions, holder=engine.instance_id, claim_ttl=engine.lease_ttl
            )
            if job is None:
                break
            found = True
            task = asyncio.ensure_future(self._run_job(job))
            self._jobs.add(task)
            task.add_done_callback(self._jobs.discard)
        workflows = list(engine._workflows)
        if workflows:
            loop = asyncio.get_running_loop()
            now = loop.time()
            owed = await engine.store.find_runs_needing_pass(workflows, engine.concurrency * 2)
            for run_id in owed:
                if self._skip_until.get(run_id, 0) > now:
                    continue
                if engine._spawn_drive(run_id, on_taken=self._skipper(run_id)):
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
        engine = self.engine
        attempt = job.attempts
        guard = StepGuard(status_in=("running",), attempts=attempt, claim_holder=engine.instance_id)
        if attempt > job.max_attempts:
            # Every attempt it was allowed was claimed and lost with its worker.
            error = {
                "type": "WorkerLost",
                "message": f"step {job.key!r} lost its worker on each of its "
                f"{job.max_attempts} attempt(s)",
            }
            await self._record(job, guard, attempt - 1, "failed", error=error)
            return
        # The claim cannot see the run: a job inserted while a cancel or suspend was on
        # its way may be claimable for a moment. Whatever started after a stop returned
        # reads it here; the job goes back on the queue, halted, costing no attempt.
        run = await engine.store.get_run(job.run_id)
        if run is None or run.status != "running":
            await engine.store.update_step(
                job.run_id,
                job.key,
                guard=guard,
                changes={
                    "status": "scheduled",
                    "attempts": attempt - 1,
                    "halted": True,
                    "claim_holder": None,
                    "claim_expires_at": None,
                },
            )
            # A resume that came meanwhile may have unhalted before our write landed.
            latest = await engine.store.get_run(job.run_id)
            if latest is not None and latest.status == "running":
                await engine.store.halt_steps(job.run_id, False)
                engine._work_arrived()
            return
        function = engine._step_functions[job.function or ""]
        info = StepInfo(job.run_id, job.key, attempt, idempotency_key(job.run_id, job.key))
        keeper = asyncio.ensure_future(self._keep_claim(job, attempt))
        started = utcnow()
        attributes = {
            "workflow.run_id": job.run_id,
            "workflow.step": job.key,
            "workflow.attempt": attempt,
            "workflow.function": job.function or "",
        }
        try:
            with (
                run_log_context(job.run_id, job.traceparent),
                attempt_span(job.traceparent, job.key, attributes) as span,
            ):
                reset = _current_step.set(info)
                try:
                    async with engine._slots:
                        value = function(job.payload)
                        if inspect.isawaitable(value):
                            value = await (
                                asyncio.wait_for(value, job.timeout) if job.timeout else value
                            )
                    result = to_stored(value, f"result of step {job.key!r}")
                except Exception as exc:
                    record_failure(span, exc)
                    raise
                finally:
                    _current_step.reset(reset)
        except Exception as exc:
            error = error_info(exc)
            if attempt < job.max_attempts:
                wait = retry_delay_seconds(job.retry_delay or 0, attempt, random.random())
                due = utcnow() + timedelta(seconds=wait)
                await self._record(
                    job,
                    guard,
                    attempt,
                    "scheduled",
                    error=error,
                    due_at=due,
                    started_at=started,
                    retry=True,
                )
                engine._arm_timer_work(due)
                return
            await self._record(job, guard, attempt, "failed", error=error, started_at=started)
            return
        finally:
            keeper.cancel()
        await self._record(job, guard, attempt, "succeeded", result=result, started_at=started)

    async def _record(
        self,
        job: StepRecord,
        guard: StepGuard,
        attempt: int,
        status: Any,
        *,
        result: Any = None,
        error: dict[str, Any] | None = None,
        due_at: Any = None,
        started_at: Any = None,
        retry: bool = False,
    ) -> None:
        now = utcnow()
        changes: dict[str, Any] = {
            "status": status,
            "result": result,
            "error": error,
            "updated_at": now,
            "claim_holder": None,
            "claim_expires_at": None,
        }
        if due_at is not None:
            changes["due_at"] = due_at
        if status in ("succeeded", "failed"):
            changes["ended_at"] = now
            changes["notified"] = False  # until the run is told, below
        if status == "failed" and attempt != job.attempts:
            changes["attempts"] = attempt
        entry = AttemptEntry(
            attempt=job.attempts,
            status="failed" if error else status,
            at=now,
            started_at=started_at,
            error=error,
        )
        if not await self.engine.store.update_step(
            job.run_id, job.key, guard=guard, changes=changes, entry=entry
        ):
            log.warning(
                "run %s: step %r attempt %d lost its claim; outcome dropped",
                job.run_id,
                job.key,
                job.attempts,
            )
            return
        if self.engine.mirror is not None:
            recorded = await self.engine.store.get_step(job.run_id, job.key)
            if recorded is not None:
                await mirror_step(self.engine.mirror, recorded)
        if not retry:
            await self.engine.notify_run(job.run_id, job.key)

    async def _keep_claim(self, job: StepRecord, attempt: int) -> None:
        engine = self.engine
        while True:
            await asyncio.sleep(engine.lease_ttl / 3)
            if not await engine.store.extend_claim(
                job.run_id,
                job.key,
                holder=engine.instance_id,
                attempt=attempt,
                claim_ttl=engine.lease_ttl,
            ):
                log.warning("run %s: lost the claim on step %r", job.run_id, job.key)
                return
