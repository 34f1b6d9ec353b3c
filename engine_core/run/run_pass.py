"""One pass of a run: replay the workflow body from the top against its recorded steps,
then record where the run stands (parked, completed, failed, compensating...).

A finished step returns its record. An unfinished inline step runs here; anything
else that has to wait (a dispatched step, a sleep, an event, a child run, a long retry
delay) is armed and the pass ends, holding nothing while the run waits.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

import engine_core.common.lifecycle_log as lifecycle_log
import engine_core.run.inline as inline
import engine_core.run.patches as patches
import engine_core.run.waits as waits
from engine_core.common.convert import declared_parameter, from_json
from engine_core.common.durations import Duration
from engine_core.common.outages import StoreDown
from engine_core.common.values import check_fits, check_name, record_limit, to_stored, value_limit
from engine_core.errors import NotSerializableError, StepFailedError, StoreUnavailableError
from engine_core.records import TERMINAL, RunState, StepRecord
from engine_core.run.attempt import error_info
from engine_core.run.body_hooks import running_body
from engine_core.run.branches import Ambiguous
from engine_core.run.context import WorkflowContext
from engine_core.run.control import expiry
from engine_core.run.divergence import Diverged, Mismatch
from engine_core.run.keys import compensation_key
from engine_core.run.mismatch import ValueMismatch, read_input
from engine_core.run.pass_state import PassState
from engine_core.run.signals import SIGNALS, Parked, Stopped
from engine_core.run.streams import BodyStreams
from engine_core.run.transitions import woken
from engine_core.run.update_request import UpdateRequest, reply_key, taken_request
from engine_core.run.values import VALUE_CALL, BodyValues
from engine_core.tracing import run_log_context

#: How a pass ended: the run ended, it waits for something, a stop or a newer pass
#: fenced it out, this process is shutting down and the run is owed to the fleet, or the
#: store went away.
PassEnd = Literal["terminal", "parked", "stopped", "requeued", "unavailable"]

log = logging.getLogger("engine_core")


_T = TypeVar("_T")


class RunPass(PassState):
    """Replays the body once and settles the run; the steps the body calls land here."""

    _streams: BodyStreams | None = None

    async def execute(self) -> PassEnd:
        """Replay the body once and record where the run stands ("unavailable": a store
        outage ended the pass; the driver gives it again once the store is back)."""
        try:
            # Every line the pass's code logs (the body, its steps, its compensations)
            # names the run, its trace and its workflow.
            with run_log_context(self.run.run_id, self.traceparent, self.run.workflow):
                return await self._execute()
        except (StoreDown, StoreUnavailableError):
            return "unavailable"

    async def _execute(self) -> PassEnd:
        fn = self.runtime.workflow_fn(self.run.workflow)
        assert fn is not None, "the driver only runs passes of registered workflows"
        failure: BaseException | None = None
        output: Any = None
        try:
            # An input its type refuses (from a client without the code, say) fails
            # the run with InvalidInputError: no step of it has run.
            data = read_input(self.run.workflow, self.run.input, declared_parameter(fn, 1))
            ctx = WorkflowContext(self)
            with self.names.body(), running_body(ctx):
                output = await fn(ctx, data)
        except BaseException as exc:
            failure = exc
        await self.drain()
        for writes in (self._streams, self.values):
            if writes is None:
                continue
            try:
                await writes.flush()  # the body's last writes, before the pass ends
            except StoreUnavailableError:
                return "unavailable"
            except Exception as exc:
                failure = failure or exc
        if self.checks.mismatch is not None:
            return await self._diverged(self.checks.mismatch)
        signal = _signal_in(failure)
        if signal is Stopped:
            return "stopped"
        if signal is StoreDown:
            return "unavailable"
        if isinstance(failure, asyncio.CancelledError):
            raise failure
        try:
            if self.replay_only:
                # A compensating run replays only to learn its compensations.
                return await self._compensate(None)
            if signal is Parked:
                return await self._parked()
            if isinstance(failure, ValueMismatch):
                return await self._mismatch(failure)
            if failure is not None:
                if isinstance(failure, KeyboardInterrupt | SystemExit):
                    raise failure
                return await self._fail(failure)
            what = f"output of workflow {self.run.workflow!r}"
            stored = to_stored(output, what, value_limit(self.store))
            check_fits(what, self.run.input, stored, limit=record_limit(self.store))
            return await self._end("completed", stored, None)
        except Stopped:
            return "stopped"
        except NotSerializableError as exc:
            return await self._fail(exc)

    async def _settle(
        self, status: RunState | None, output: Any, error: dict[str, Any] | None
    ) -> bool:
        """The write that ends the pass (``status`` None: it parks, unless a trigger came
        meanwhile), carrying the outcomes still to write."""
        carry = await self.end_writes(output, error)
        ok = await self.store.settle_run(
            self.run.run_id,
            token=self.run.token,
            expect=(self.status,),
            status=status,
            output=output,
            error=error,
            outcomes=carry.outcomes,
            forget=carry.forget,
            idle_only=status is None,
            keep_lease=status == "compensating",
            expire_at=expiry(self.runtime, self.run) if status in TERMINAL else None,
        )
        await self.settled(ok, carry)
        if ok and status is not None:
            await self.control.run_ended(self.run, status, output, error)
        return ok

    async def _end(self, status: RunState, output: Any, error: dict[str, Any] | None) -> PassEnd:
        return "terminal" if await self._settle(status, output, error) else "stopped"

    async def _parked(self) -> PassEnd:
        if not await self._settle(None, None, None):
            return "stopped"
        return "requeued" if self.requeue else "parked"

    async def _diverged(self, mismatch: Mismatch) -> PassEnd:
        """The code parted from the record: write nothing more, suspend the run with
        the divergence as its error (``engine.resume`` after a fixed deploy replays)."""
        error = mismatch.error_info()
        lifecycle_log.pass_diverged(self.run, mismatch.step, error["message"])
        try:
            if not await self._settle("suspended", None, error):
                return "stopped"
        except Stopped:
            return "stopped"
        await self.control.halt_suspended(self.run_id)  # as ``engine.suspend``
        return "stopped"

    async def _fail(self, failure: BaseException) -> PassEnd:
        # Queue jobs of a failing run start no more. Halted before the write that ends
        # the run, so that a retry (which needs the run failed) unhalts after; if that
        # write is fenced out, the run is another pass's now and may be parked on one of
        # them: the halt is undone unless the run was stopped.
        await self.store.halt_steps(self.run_id, True)
        end = await self._failing(error_info(failure))
        if end == "stopped":
            await self.runtime.outages.call(lambda: self.control.reconcile_halt(self.run_id))
        return end

    async def _failing(self, error: dict[str, Any]) -> PassEnd:
        if self._compensable():
            if not await self._settle("compensating", None, error):
                return "stopped"
            self.status = "compensating"
            self.run.error = error
            try:
                return await self._compensate(error)
            except Stopped:
                return "stopped"
        return await self._end("failed", None, error)

    async def _mismatch(self, failure: ValueMismatch) -> PassEnd:
        """A recorded value no longer fits the code: the run is suspended with the error,
        as a divergent one is; ``engine.resume`` after a fixed deploy replays it again."""
        error = {
            **error_info(failure),
            "type": "NonDeterminismError",
            "step": failure.step,
            "recorded": failure.recorded,
            "found": failure.found,
            "reason": failure.REASON,
        }
        lifecycle_log.pass_diverged(self.run, error.get("step"), error["message"])
        end = await self._end("suspended", None, error)
        if end == "terminal":
            # After the write that stopped the run: halted before it, a fenced-out write
            # would leave another pass's run with halted jobs.
            await self.control.halt_suspended(self.run_id)
        return end

    def _compensable(self) -> list[StepRecord]:
        done = [
            s
            for s in self.steps.values()
            if s.compensable and s.status == "succeeded" and s.key in self.compensations
        ]
        now = self.clock.now()
        done.sort(key=lambda s: (s.ended_at or s.updated_at or now, s.key))
        return done

    async def _compensate(self, error: dict[str, Any] | None) -> PassEnd:
        """Undo the succeeded steps in reverse order of completion, each as a durable step."""
        error = dict(error or self.run.error or {})
        self.replay_only = False
        todo = self._compensable()
        if not todo:
            return await self._end("cancelled", None, error or None)
        failed: list[str] = []
        for step in reversed(todo):
            undo = self.compensations[step.key]
            try:
                argument = from_json(step.result, declared_parameter(undo, 0))
            except (ValueError, TypeError):  # the recorded result no longer fits `undo`
                failed.append(step.key)
                continue
            try:
                spec = inline.InlineSpec(
                    key=compensation_key(step.key),
                    fn=undo,
                    args=(argument,),
                    max_attempts=0,  # one attempt, never retried
                    delay=0.0,
                    timeout=None,
                    compensable=False,
                    kind="compensation",
                )
                await inline.run_inline(self, spec)
            except StepFailedError:
                failed.append(step.key)
            except Parked:
                await self.drain()
                return await self._parked()
        if not failed:
            return await self._end("compensated", None, error)
        error["compensation_failed"] = failed
        error["message"] = (
            f"{error.get('message', 'run failed')}; compensation failed for: " + ", ".join(failed)
        )
        return await self._end("compensation_failed", None, error)

    # ---- what the body calls (see WorkflowContext) --------------------------------

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
        kwargs: dict[str, Any] | None = None,
        declared: Any = None,
    ) -> Any:
        """``ctx.step`` (see :func:`engine_core.run.inline.inline_step`)."""
        return await self._riding(
            inline.inline_step,
            self,
            name,
            fn,
            args,
            retries=retries,
            retry_delay=retry_delay,
            compensate=compensate,
            timeout=timeout,
            kwargs=kwargs,
            declared=declared,
        )

    def registered(
        self, kind: Literal["workflow", "step function"], name: str
    ) -> Callable[..., Any] | None:
        """The workflow or step function ``name`` registered in this process, or None."""
        if kind == "workflow":
            return self.runtime.workflow_fn(name)
        return self.runtime.step_fn(name)

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
        """``ctx.dispatch`` (see :func:`engine_core.run.waits.dispatch_step`)."""
        return await self._riding(
            waits.dispatch_step,
            self,
            name,
            function,
            payload,
            retries=retries,
            retry_delay=retry_delay,
            timeout=timeout,
        )

    async def sleep_step(self, name: str, duration: Duration) -> None:
        """``ctx.sleep`` (see :func:`engine_core.run.waits.sleep_step`)."""
        await self._riding(waits.sleep_step, self, name, duration)

    async def event_step(self, name: str, timeout: Duration | None) -> Any:
        """``ctx.wait_for_event`` (see :func:`engine_core.run.waits.event_step`)."""
        return await self._riding(waits.event_step, self, name, timeout)

    async def child_step(self, name: str, workflow: str, input: Any) -> Any:
        """``ctx.child`` (see :func:`engine_core.run.waits.child_step`)."""
        return await self._riding(waits.child_step, self, name, workflow, input)

    async def patched(self, patch_id: str) -> bool:
        """``ctx.patched`` (see :func:`engine_core.run.patches.patched`)."""
        return await patches.patched(self, patch_id)

    async def _riding(
        self, call: Callable[..., Coroutine[Any, Any, _T]], *args: Any, **kwargs: Any
    ) -> _T:
        """``call``, a durable boundary: the body's stream and value writes so far go out
        with its write (the same turn of the group commit); the pass's end waits for
        them."""
        sending = [w.kick() for w in (self._streams, self.values) if w is not None]
        if self.runtime.config.always_replay:
            result = await self._ending_pass(call, *args, **kwargs)
        else:
            result = await call(*args, **kwargs)
        for each in sending:
            if each is not None and each.done():
                await each  # a failed write surfaces here (waiting would yield: see _keep)
        return result

    async def set_value(self, key: str, value: Any) -> None:
        """``ctx.set_value`` (see :mod:`engine_core.run.values`)."""
        check_name(key, "value key")
        try:
            branch, position = self.names.place(VALUE_CALL + key)
        except Ambiguous:
            self.checks.cannot_tell_apart(f"value {key!r}", f"set_value({key!r})")
        if self.replay_only:
            return  # a compensating run replays only to learn its compensations
        if self.values is None:
            landed = self.runtime.value_written
            self.values = BodyValues(
                self.store, self.run_id, self.clock, first_pass=self.run.passes <= 1, landed=landed
            )
        await self.values.set(key, value, branch=branch, position=position)

    async def update_step(self, name: str, timeout: Duration | None) -> UpdateRequest[Any] | None:
        """``ctx.wait_for_update`` (see :func:`engine_core.run.waits.update_step`)."""
        key, taken = await self._riding(waits.update_step, self, name, timeout)
        return taken_request(self, name, key, taken)

    async def reply_update(self, wait_key: str, update_id: str, answer: dict[str, Any]) -> None:
        """``req.reply`` and ``req.reject``: a durable step, after the body's values so
        far (a caller that has the answer reads them)."""
        key = reply_key(wait_key)
        if self.finished(key) is not None:
            return  # answered by an earlier pass
        if self.checks.mismatch is not None:
            raise Diverged(self.checks.mismatch)  # a divergent pass writes nothing more
        self.names.refuse_late()
        await self._riding(self._answer, key, update_id, answer)

    async def _answer(self, key: str, update_id: str, answer: dict[str, Any]) -> None:
        if self.values is not None:
            await self.values.landed()
        now = self.clock.now()
        stored = await self.store.answer_update(self.run_id, update_id, answer, answered_at=now)
        kept = stored.answer if stored is not None and stored.answer is not None else answer
        self.record(key, woken("reply", update_id, kept, now=now))
        if stored is not None:
            self.runtime.update_answered(stored)

    async def _ending_pass(
        self, call: Callable[..., Coroutine[Any, Any, _T]], *args: Any, **kwargs: Any
    ) -> _T:
        """``always_replay``: ``call``, then, if it recorded an outcome (the step ran, a
        wait ended, a job's result came), end the pass there, before the body sees it:
        the next pass replays the body from the top and takes the outcome from the
        record, so a body that does not reach the same steps in the same order diverges
        in its tests (``NonDeterminismError``) and not after a crash in production."""
        before = self.recorded
        try:
            result = await call(*args, **kwargs)
        except StepFailedError:
            if self.recorded != before:
                await self._replay_next()
            raise
        if self.recorded != before:
            await self._replay_next()
        return result

    async def _replay_next(self) -> None:
        self.again = True
        await self.park()

    async def write_stream(self, key: str, value: Any, *, closed: bool = False) -> None:
        """``ctx.write_stream``: durable with the body's next write."""
        if self._streams is None:
            self._streams = BodyStreams(
                self.store, self.run_id, self.clock, first_pass=self.run.passes <= 1
            )
        await self._streams.write(key, value, closed=closed)


def _signal_in(exc: BaseException | None) -> type[BaseException] | None:
    """The strongest control signal in ``exc`` (also inside an exception group)."""
    if exc is None:
        return None
    found = list(_leaves(exc)) if isinstance(exc, BaseExceptionGroup) else [exc]
    for kind in SIGNALS:
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
