"""What one pass knows and does at every step boundary, whatever the kind of step.

A pass replays the workflow body from the top. This module holds its state (the run as
the pass began, the steps as recorded, what the pass started) and the operations every
kind of step shares: naming the step, starting an attempt (the run's token and status
fence it), recording an outcome, and parking the pass.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TypeVar

from engine_core.control import RunControl
from engine_core.errors import StepFailedError
from engine_core.mirror import mirror_step
from engine_core.records import Lease, RunRecord, RunState, StepRecord, utcnow
from engine_core.runtime import Runtime
from engine_core.store import Store
from engine_core.transitions import Transition, write
from engine_core.values import check_name

log = logging.getLogger("engine_core")

_T = TypeVar("_T")


class Parked(BaseException):
    """The step is armed and waits for something outside this pass."""


class Stopped(BaseException):
    """The run was stopped, or a newer pass owns it: this pass must write nothing more."""


class ReplayEnd(BaseException):
    """A compensating replay reached a step that never finished."""


#: The control signals a pass raises through the body, strongest first.
SIGNALS: tuple[type[BaseException], ...] = (Parked, Stopped, ReplayEnd)


def stored_failure(step: StepRecord) -> StepFailedError:
    """The error a failed step raises in the body, as its record tells it."""
    error = step.error or {}
    return StepFailedError(
        step.key,
        step.attempts,
        str(error.get("type", "Error")),
        str(error.get("message", "")),
    )


class PassState:
    """The state of one pass: the run as it began, its steps, and what it started."""

    def __init__(
        self,
        store: Store,
        runtime: Runtime,
        control: RunControl,
        run: RunRecord,
        lease: Lease,
        steps: list[StepRecord],
    ) -> None:
        self.store = store
        self.runtime = runtime
        self.control = control
        self.run = run
        self.lease = lease
        self.steps = {s.key: s for s in steps}
        self.status: RunState = run.status
        #: A compensating run replays only to learn its compensations.
        self.replay_only = run.status == "compensating"
        self.compensations: dict[str, Callable[[Any], Any]] = {}
        self.traceparent: str | None = run.wire.get("traceparent")
        #: Set when the pass ended because this process is shutting down.
        self.requeue = False
        self._seen: Counter[str] = Counter()
        # Steps recorded since the last start: their in-flight marks go with the next one.
        self._done: set[str] = set()
        self._active = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def workflow(self) -> str:
        return self.run.workflow

    def key(self, name: str) -> str:
        """The step's key in this run: its name, with an ordinal when reached again."""
        check_name(name, "step name")
        seen = self._seen[name]
        self._seen[name] += 1
        return name if seen == 0 else f"{name}#{seen}"

    def finished(self, key: str) -> StepRecord | None:
        """The step's record if it has finished; raises its failure if it failed."""
        step = self.steps.get(key)
        if step is not None:
            if step.status == "succeeded":
                return step
            if step.status == "failed":
                raise stored_failure(step)
        if self.replay_only:
            raise ReplayEnd()
        return None

    # ---- the step boundary -------------------------------------------------------

    async def start(self, key: str, attempt: int) -> None:
        """Mark attempt ``attempt`` of ``key`` in flight (0: a step being armed), if the
        run may still start it; else end the pass (:class:`Stopped`)."""
        if self.runtime.closing:
            # Shutting down: start nothing new; end the pass as if parked.
            self.requeue = True
            raise Parked()
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
            raise Stopped()

    async def record(self, key: str, transition: Transition) -> StepRecord:
        """Write an inline attempt's outcome, fenced: it lands only for a newer attempt."""
        if not await write(self.store, self.run.run_id, key, transition):
            # A newer attempt (or a zombie pass's outcome) owns the step now; the next
            # pass replays from what is stored.
            await self.store.request_pass(self.run.run_id)
            raise Stopped()
        changes = transition.changes
        record = self.steps.get(key) or StepRecord(
            run_id=self.run.run_id, key=key, kind=changes["kind"], status=changes["status"]
        )
        self.steps[key] = transition.apply(record)
        self._done.add(key)
        await mirror_step(self.runtime.mirror, record)
        return record

    def settled_here(self, step: StepRecord) -> None:
        """A step this pass settled (a wake, a child): keep it, and clear its mark."""
        self.steps[step.key] = step
        self._done.add(step.key)

    # ---- steps beside each other, and parking ------------------------------------

    async def track(self, work: Awaitable[_T]) -> _T:
        """Await one step's work, counted as running (so the pass drains it before it
        settles); a step that parks parks the pass once its siblings have finished."""
        self._active += 1
        try:
            return await work
        except Parked:
            pass
        finally:
            self._active -= 1
            if not self._active:
                self._idle.set()
        await self.park()

    async def park(self) -> NoReturn:
        """End the pass here, once the steps running beside this one have finished: under
        ``asyncio.gather`` a sibling's failure must reach the body before the park does,
        or every replay would park in the same place and never see it."""
        await asyncio.sleep(0)  # siblings gathered with us get to start (and be counted)
        await self.drain()
        raise Parked()

    async def drain(self) -> None:
        """Wait for every step still running: steps started under ``asyncio.gather`` go
        on after a sibling ends the body, and must land before the pass lets go."""
        while self._active:
            self._idle.clear()
            await self._idle.wait()
