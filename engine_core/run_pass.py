"""One pass of a run: replay the workflow body from the top against its recorded steps.

A finished step returns its record. An unfinished inline step runs here; anything
else that has to wait (a dispatched step, a sleep, an event, a child run, a long retry
delay) is armed and the pass ends, holding nothing while the run waits.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
import traceback
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from engine_core.context import StepInfo, WorkflowContext, _current_step
from engine_core.durations import Duration, check_retry_delay, parse_duration, retry_delay_seconds
from engine_core.errors import NotSerializableError, StepFailedError, WorkflowNotRegisteredError
from engine_core.mirror import mirror_step
from engine_core.records import (
    AttemptEntry,
    Lease,
    RunRecord,
    RunState,
    StepGuard,
    StepKind,
    StepRecord,
    utcnow,
)
from engine_core.tracing import attempt_span, record_failure, run_log_context
from engine_core.values import check_name, idempotency_key, to_stored

if TYPE_CHECKING:
    from engine_core.engine import Engine

log = logging.getLogger("engine_core")

# Retry delays up to this long are waited out in memory, under the run's lease;
# longer ones re-arm the step durably and end the pass.
INLINE_RETRY_LIMIT_S = 1.0
_STACK_LIMIT = 4000

PassEnd = Literal["terminal", "parked", "stopped", "requeued"]


class _Parked(BaseException):
    """The step is armed and waits for something outside this pass."""


class _Stopped(BaseException):
    """The run was stopped, or a newer pass owns it: this pass must write nothing more."""


class _ReplayEnd(BaseException):
    """A compensating replay reached a step that never finished."""


_CONTROL = (_Parked, _Stopped, _ReplayEnd)


def error_info(exc: BaseException) -> dict[str, Any]:
    """How an exception is stored: type, message, stack, and the step fields if any."""
    stack = "".join(traceback.format_exception(exc))[-_STACK_LIMIT:]
    info: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc), "stack": stack}
    if isinstance(exc, StepFailedError):
        info.update(step=exc.step, attempts=exc.attempts, error_type=exc.error_type)
        info["message"] = str(exc)
    return info


def stored_failure(step: StepRecord) -> StepFailedError:
    error = step.error or {}
    return StepFailedError(
        step.key,
        step.attempts,
        str(error.get("type", "Error")),
        str(error.get("message", "")),
    )


def _check_retries(retries: object) -> int:
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"retries must be a non-negative integer, not {retries!r}")
    return retries


class RunPass:
    """The state of one pass: the run as it began, its steps, and what it started."""

    def __init__(
        self,
        engine: Engine,
        run: RunRecord,
        lease: Lease,
        steps: list[StepRecord],
    ) -> None:
        self.engine = engine
        self.store = engine.store
        self.run = run
        self.lease = lease
        self.steps = {s.key: s for s in steps}
        self.status: RunState = run.status
        self.replay_only = run.status == "compensating"
        self._seen: Counter[str] = Counter()
        self._done: set[str] = set()
        self._compensations: dict[str, Callable[[Any], Any]] = {}
        self._active = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self.traceparent: str | None = run.wire.get("traceparent")
        self.requeue = False

    # ---- running the body -------------------------------------------------------

    async def execute(self) -> PassEnd:
        """Replay the body once and record where the run stands."""
        fn = self.engine._workflows[self.run.workflow]
        failure: BaseException | None = None
        output: Any = None
        try:
            with run_log_context(self.run.run_id, self.traceparent):
                output = await fn(WorkflowContext(self), self.run.input)
        except BaseException as exc:
            failure = exc
        await self._drain()
        control = _control_of(failure)
        if control is _Stopped:
            return "stopped"
        if isinstance(failure, asyncio.CancelledError):
            raise failure
        try:
            if self.replay_only:
                # A compensating run replays only to learn its compensations.
                return await self._compensate(None)
            if control is _Parked:
                ok = await self._settle(None, None, None)
                if not ok:
                    return "stopped"
                return "requeued" if self.requeue else "parked"
            if failure is not None:
                if isinstance(failure, KeyboardInterrupt | SystemExit):
                    raise failure
                return await self._fail(failure)
            stored = to_stored(output, f"output of workflow {self.run.workflow!r}")
        except _Stopped:
            return "stopped"
        except NotSerializableError as exc:
            return await self._fail(exc)
        ok = await self._settle("completed", stored, None)
        return "terminal" if ok else "stopped"

    async def _drain(self) -> None:
        # Steps started under asyncio.gather go on after a sibling ends the body;
        # their outcomes must land before the pass lets go of the run.
        while self._active:
            self._idle.clear()
            await self._idle.wait()

    async def _settle(
        self, status: RunState | None, output: Any, error: dict[str, Any] | None
    ) -> bool:
        ok = await self.store.settle_run(
            self.run.run_id,
            token=self.run.token,
            expect=(self.status,),
            status=status,
            output=output,
            error=error,
        )
        if ok and status is not None:
            await self.engine._run_ended(self.run, status, output, error)
        return ok

    async def _fail(self, failure: BaseException) -> PassEnd:
        error = error_info(failure)
        # Queue jobs of a failing run must not start any more.
        await self.store.halt_steps(self.run.run_id, True)
        if self._compensable():
            if not await self._settle("compensating", None, error):
                return "stopped"
            self.status = "compensating"
            self.run.error = error
            try:
                return await self._compensate(error)
            except _Stopped:
                return "stopped"
        ok = await self._settle("failed", None, error)
        return "terminal" if ok else "stopped"

    def _compensable(self) -> list[StepRecord]:
        done = [
            s
            for s in self.steps.values()
            if s.compensable and s.status == "succeeded" and s.key in self._compensations
        ]
        done.sort(key=lambda s: (s.ended_at or s.updated_at or utcnow(), s.key))
        return done

    async def _compensate(self, error: dict[str, Any] | None) -> PassEnd:
        """Undo the succeeded steps in reverse order of completion, each as a durable step."""
        error = dict(error or self.run.error or {})
        self.replay_only = False
        todo = self._compensable()
        if not todo:
            ok = await self._settle("cancelled", None, error or None)
            return "terminal" if ok else "stopped"
        failed: list[str] = []
        for step in reversed(todo):
            undo = self._compensations[step.key]
            try:
                await self._run_inline(
                    f"compensate:{step.key}",
                    undo,
                    (step.result,),
                    0,
                    0.0,
                    None,
                    False,
                    kind="compensation",
                )
            except StepFailedError:
                failed.append(step.key)
            except _Parked:
                await self._drain()
                if not await self._settle(None, None, None):
                    return "stopped"
                return "requeued" if self.requeue else "parked"
        if failed:
            error["compensation_failed"] = failed
            error["message"] = (
                f"{error.get('message', 'run failed')}; compensation failed for: "
                + ", ".join(failed)
            )
            ok = await self._settle("compensation_failed", None, error)
        else:
            ok = await self._settle("compensated", None, error)
        return "terminal" if ok else "stopped"

    # ---- helpers shared by every kind of step -----------------------------------

    def _key(self, name: str) -> str:
        check_name(name, "step name")
        seen = self._seen[name]
        self._seen[name] += 1
        return name if seen == 0 else f"{name}#{seen}"

    async def _start(self, key: str, attempt: int) -> None:
        if self.engine._closing:
            # Shutting down: start nothing new; end the pass as if parked.
            self.requeue = True
            raise _Parked()
        done, self._done = self._done, set()
        ok = await self.store.start_step(
            self.run.run_id,
            token=self.run.token,
            status=self.status,
            key=key,
            attempt=attempt,
            started_at=utcnow(),
            done=done,
        )
        if not ok:
            raise _Stopped()

    async def _record(
        self,
        key: str,
        kind: StepKind,
        attempt: int,
        status: Literal["pending", "scheduled", "succeeded", "failed"],
        *,
        started_at: datetime | None,
        result: Any = None,
        error: dict[str, Any] | None = None,
        due_at: datetime | None = None,
        extra: dict[str, Any] | None = None,
    ) -> StepRecord:
        """Write an inline attempt's outcome, fenced: it lands only for a newer attempt."""
        now = utcnow()
        changes: dict[str, Any] = {
            "kind": kind,
            "status": status,
            "attempts": attempt,
            "result": result,
            "error": error,
            "due_at": due_at,
            "updated_at": now,
            **(extra or {}),
        }
        if status in ("succeeded", "failed"):
            changes["ended_at"] = now
        entry_status: Any = "failed" if error is not None else status
        entry = AttemptEntry(
            attempt=attempt, status=entry_status, at=now, started_at=started_at, error=error
        )
        ok = await self.store.update_step(
            self.run.run_id,
            key,
            guard=StepGuard(attempts_below=attempt, missing_ok=True),
            changes=changes,
            entry=entry,
        )
        if not ok:
            # A newer attempt (or a zombie pass's outcome) owns the step now; the next
            # pass replays from what is stored.
            await self.store.request_pass(self.run.run_id)
            raise _Stopped()
        record = self.steps.get(key) or StepRecord(
            run_id=self.run.run_id, key=key, kind=kind, status=status
        )
        for name, value in changes.items():
            setattr(record, name, value)
        record.history.append(entry)
        self.steps[key] = record
        self._done.add(key)
        await mirror_step(self.engine.mirror, record)
        return record

    async def _tracked(self, coro: Any) -> Any:
        self._active += 1
        try:
            return await coro
        except _Parked:
            pass
        finally:
            self._active -= 1
            if not self._active:
                self._idle.set()
        await self._park()

    async def _park(self) -> NoReturn:
        """End the pass here, once the steps running beside this one have finished: under
        ``asyncio.gather`` a sibling's failure must reach the body before the park does,
        or every replay would park in the same place and never see it."""
        await asyncio.sleep(0)  # siblings gathered with us get to start (and be counted)
        await self._drain()
        raise _Parked()

    def _finished(self, key: str) -> StepRecord | None:
        """The step's record if it has finished; raises its failure if it failed."""
        step = self.steps.get(key)
        if step is not None:
            if step.status == "succeeded":
                return step
            if step.status == "failed":
                raise stored_failure(step)
        if self.replay_only:
            raise _ReplayEnd()
        return None

    # ---- inline steps ------------------------------------------------------------

    async def inline_step(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        *,
        retries: int,
        retry_delay: Duration,
        compensate: Callable[[Any], Any] | None,
        timeout: Duration | None,
    ) -> Any:
        key = self._key(name)
        attempts = _check_retries(retries) + 1
        delay = check_retry_delay(retry_delay)
        limit = parse_duration(timeout, what="timeout") if timeout is not None else None
        if compensate is not None:
            self._compensations[key] = compensate
        done = self._finished(key)
        if done is not None:
            return done.result
        return await self._tracked(
            self._run_inline(key, fn, args, attempts, delay, limit, compensate is not None)
        )

    async def _run_inline(
        self,
        key: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        max_attempts: int,
        delay: float | str,
        timeout: float | None,
        compensable: bool,
        *,
        kind: StepKind = "inline",
    ) -> Any:
        step = self.steps.get(key)
        if step is not None and step.status == "succeeded":
            return step.result
        if step is not None and step.status == "failed":
            raise stored_failure(step)
        prior = step.attempts if step is not None else 0
        extra = {"max_attempts": max_attempts, "retry_delay": delay, "compensable": compensable}
        lost = self.run.inflight.get(key)
        if lost is not None and lost.attempt > prior:
            # Our pass owns the lease, so an attempt still marked in flight belongs to
            # a pass that died mid-step. Count it, so a step that kills its process
            # every time runs out of attempts instead of looping.
            prior = lost.attempt
            exhausted = prior >= max_attempts
            error = {
                "type": "WorkerLost",
                "message": f"the process running attempt {prior} of step {key!r} "
                "stopped before recording its outcome",
            }
            log.warning(
                "run %s: step %r attempt %d was lost with its process%s",
                self.run.run_id,
                key,
                prior,
                "; attempts exhausted" if exhausted else "; running it again",
            )
            step = await self._record(
                key,
                kind,
                prior,
                "failed" if exhausted else "pending",
                started_at=lost.started_at,
                error=error,
                extra=extra,
            )
            if exhausted:
                raise stored_failure(step)
        elif step is not None and step.status == "scheduled" and step.due_at is not None:
            if step.due_at > utcnow():
                self.engine._arm_timer(self.run.run_id, step.due_at)
                raise _Parked()
        attempt = prior + 1
        while True:
            await self._start(key, attempt)
            started = utcnow()
            info = StepInfo(self.run.run_id, key, attempt, idempotency_key(self.run.run_id, key))
            try:
                result = await self._call(info, fn, args, timeout)
                stored = to_stored(result, f"result of step {key!r}")
            except Exception as exc:
                error = error_info(exc)
                if attempt < max_attempts and not isinstance(exc, NotSerializableError):
                    wait = retry_delay_seconds(delay, attempt, random.random())
                    if wait <= INLINE_RETRY_LIMIT_S:
                        await self._record(
                            key,
                            kind,
                            attempt,
                            "pending",
                            started_at=started,
                            error=error,
                            extra=extra,
                        )
                        await asyncio.sleep(wait)
                        attempt += 1
                        continue
                    due = utcnow() + timedelta(seconds=wait)
                    await self._record(
                        key,
                        kind,
                        attempt,
                        "scheduled",
                        started_at=started,
                        error=error,
                        due_at=due,
                        extra=extra,
                    )
                    self.engine._arm_timer(self.run.run_id, due)
                    raise _Parked() from None
                await self._record(
                    key, kind, attempt, "failed", started_at=started, error=error, extra=extra
                )
                raise StepFailedError(key, attempt, type(exc).__name__, str(exc)) from exc
            await self._record(
                key, kind, attempt, "succeeded", started_at=started, result=stored, extra=extra
            )
            return stored

    async def _call(
        self,
        info: StepInfo,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        timeout: float | None,
    ) -> Any:
        attributes = {
            "workflow.run_id": info.run_id,
            "workflow.name": self.run.workflow,
            "workflow.step": info.step,
            "workflow.attempt": info.attempt,
        }
        with attempt_span(self.traceparent, info.step, attributes) as span:
            reset = _current_step.set(info)
            try:
                async with self.engine._slots:
                    value = fn(*args)
                    if inspect.isawaitable(value):
                        value = await (asyncio.wait_for(value, timeout) if timeout else value)
                return value
            except Exception as exc:
                record_failure(span, exc)
                raise
            finally:
                _current_step.reset(reset)

    # ---- steps that wait outside the pass ----------------------------------------

    def _scheduled(
        self, key: str, kind: StepKind, due_at: datetime | None, **fields: Any
    ) -> StepRecord:
        """A step record armed now, waiting for ``due_at`` (or for something outside)."""
        now = utcnow()
        return StepRecord(
            run_id=self.run.run_id,
            key=key,
            kind=kind,
            status="scheduled",
            due_at=due_at,
            scheduled_at=now,
            updated_at=now,
            traceparent=self.traceparent,
            **fields,
        )

    async def _arm(self, step: StepRecord) -> None:
        """Record a waiting step (once: a concurrent arm of the same step is a no-op)."""
        await self._start(step.key, 0)
        if await self.store.insert_step(step):
            await mirror_step(self.engine.mirror, step)
        self.steps[step.key] = step

    async def dispatch_step(
        self,
        name: str,
        function: str,
        payload: Any,
        *,
        retries: int,
        retry_delay: Duration,
        timeout: Duration | None,
    ) -> Any:
        key = self._key(name)
        check_name(function, "step function name")
        attempts = _check_retries(retries) + 1
        delay = check_retry_delay(retry_delay)
        limit = parse_duration(timeout, what="timeout") if timeout is not None else None
        done = self._finished(key)
        if done is not None:
            return done.result
        if key not in self.steps:
            job = self._scheduled(
                key,
                "dispatch",
                utcnow(),
                max_attempts=attempts,
                retry_delay=delay,
                timeout=limit,
                function=function,
                payload=to_stored(payload, f"payload of step {key!r}"),
            )
            await self._tracked(self._arm(job))
            self.engine._work_arrived()
        elif self.steps[key].halted:
            # A suspend that raced a resume can leave the job halted on a running run.
            await self._tracked(self._start(key, 0))
            await self.store.halt_steps(self.run.run_id, False)
            self.engine._work_arrived()
        await self._park()

    async def sleep_step(self, name: str, duration: Duration) -> None:
        key = self._key(name)
        seconds = parse_duration(duration, what="sleep duration")
        if self._finished(key) is not None:
            return None
        step = self.steps.get(key)
        now = utcnow()
        if step is None:
            due = now + timedelta(seconds=seconds)
            await self._tracked(self._arm(self._scheduled(key, "sleep", due, timeout=seconds)))
            self.engine._arm_timer(self.run.run_id, due)
            await self._park()
        if step.due_at is not None and step.due_at <= now:
            await self._tracked(self._wake(step, None))
            return None
        if step.due_at is not None:
            self.engine._arm_timer(self.run.run_id, step.due_at)
        await self._park()

    async def _wake(self, step: StepRecord, result: Any) -> Any:
        """Settle a scheduled step (a sleep that is due, an event, a timeout) and return
        its result: ours, or the one already recorded if another pass settled it first."""
        now = utcnow()
        changes = {
            "status": "succeeded",
            "result": result,
            "attempts": 1,
            "updated_at": now,
            "ended_at": now,
        }
        landed = await self.store.update_step(
            self.run.run_id,
            step.key,
            guard=StepGuard(status_in=("scheduled",), missing_ok=True),
            changes={"kind": step.kind, "event": step.event, **changes},
            entry=AttemptEntry(attempt=1, status="succeeded", at=now),
        )
        if not landed:
            stored = await self.store.get_step(self.run.run_id, step.key)
            if stored is None or stored.status != "succeeded":
                raise _Stopped()
            self.steps[step.key] = stored
            return stored.result
        for field_name, value in changes.items():
            setattr(step, field_name, value)
        self.steps[step.key] = step
        self._done.add(step.key)
        await mirror_step(self.engine.mirror, step)
        return result

    async def event_step(self, name: str, timeout: Duration | None) -> Any:
        check_name(name, "event name")
        key = self._key(name)
        limit = parse_duration(timeout, what="event timeout") if timeout is not None else None
        done = self._finished(key)
        if done is not None:
            return done.result
        return await self._tracked(self._wait_event(key, name, limit))

    async def _wait_event(self, key: str, name: str, limit: float | None) -> Any:
        run_id = self.run.run_id
        step = self.steps.get(key) or self._scheduled(key, "event", None, event=name)
        event = await self.store.consume_event(run_id, name, f"{run_id}\x00{key}")
        if event is not None:
            return await self._wake(step, event.payload)
        now = utcnow()
        if key not in self.steps:
            step.due_at = now + timedelta(seconds=limit) if limit is not None else None
            step.timeout = limit
            await self._arm(step)
        elif step.due_at is not None and step.due_at <= now:
            return await self._wake(step, None)
        if step.due_at is not None:
            self.engine._arm_timer(run_id, step.due_at)
        raise _Parked()

    async def child_step(self, name: str, workflow: str, input: Any) -> Any:
        key = self._key(name)
        check_name(workflow, "workflow name")
        if workflow not in self.engine._workflows:
            raise WorkflowNotRegisteredError(
                f"child step {key!r} names workflow {workflow!r}, which is not registered "
                f"on this engine (registered: {sorted(self.engine._workflows)})"
            )
        done = self._finished(key)
        if done is not None:
            return done.result
        return await self._tracked(self._await_child(key, workflow, input))

    async def _await_child(self, key: str, workflow: str, input: Any) -> Any:
        step = self.steps.get(key)
        child_id = self.engine._child_run_id(self.run.run_id, key)
        if step is None:
            stored_input = to_stored(input, f"input of child step {key!r}")
            # Due at once, so the scheduled sweep checks on the child (see recovery).
            armed = self._scheduled(
                key,
                "child",
                utcnow(),
                child_run_id=child_id,
                payload=stored_input,
                function=workflow,
            )
            await self._arm(armed)
            await self.engine._start_child(self.run, key, child_id, workflow, stored_input)
            raise _Parked()
        # The child may have ended while nobody settled this step (its process died
        # between the two writes), or never have been created: look once per replay.
        settled = await self.engine._reconcile_child(self.run, step)
        if settled is not None:
            self.steps[key] = settled
            self._done.add(key)
            if settled.status == "failed":
                raise stored_failure(settled)
            return settled.result
        raise _Parked()


def _control_of(exc: BaseException | None) -> type[BaseException] | None:
    """The strongest control signal in ``exc`` (also inside an exception group)."""
    if exc is None:
        return None
    found: list[BaseException] = []
    if isinstance(exc, BaseExceptionGroup):
        found.extend(e for e in _leaves(exc))
    else:
        found.append(exc)
    for kind in _CONTROL:
        if any(isinstance(e, kind) for e in found):
            return kind
    return None


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            out.extend(_leaves(exc))
        else:
            out.append(exc)
    return out
