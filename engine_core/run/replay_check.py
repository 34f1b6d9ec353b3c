"""``engine.replay_check``: dry replays of stored runs against this process's code.

Each run's body is replayed against its records with the checks of a real pass
(:mod:`engine_core.run.divergence`), up to its first step without a finished record,
and nothing is written: no step runs, no event is consumed, no marker is recorded. A
run that would diverge is reported with where and why, so a deploy pipeline can refuse
a build that would break live runs before it ships.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextlib import aclosing
from typing import Any, Literal

from engine_core.common.clock import Clock
from engine_core.common.convert import declared_parameter
from engine_core.common.durations import Duration
from engine_core.common.journal import merged
from engine_core.common.status import Divergence, ReplayReport
from engine_core.records import RunRecord, StepRecord
from engine_core.run.body_hooks import running_body
from engine_core.run.branches import StepNames
from engine_core.run.context import WorkflowContext
from engine_core.run.divergence import Diverged, ReplayChecks, callable_name
from engine_core.run.mismatch import INPUT_STEP, ValueMismatch, as_declared
from engine_core.run.patches import check_patch_id, has_marker
from engine_core.run.signals import stored_failure
from engine_core.run.update_request import UpdateRequest, taken_request
from engine_core.store import Store

#: Runs whose steps are read in one command, runs replayed at once, and runs listed at
#: once, oldest first: pages by creation time are served by an index on nx-27017 as on
#: MongoDB (by id, each page after the first filtered every run in Python there), so a
#: page need not be large, and fewer listed runs alive cost less garbage collection.
_BATCH = 256
_WINDOW = 1024
_PAGE = 2048
#: A body that awaits something else than its steps for this long is left unchecked.
_BODY_TIMEOUT_S = 10.0
#: The statuses of runs that have not ended: the ones a deploy can break.
_LIVE: tuple[str, ...] = ("running", "suspended", "compensating", "queued")


class _EndOfRecord(BaseException):
    """The dry replay reached a step with no finished record: it goes no further."""


class DryReplay:
    """A :class:`~engine_core.run.context.StepRunner` that only reads the records."""

    def __init__(self, run: RunRecord, steps: dict[str, StepRecord], clock: Clock) -> None:
        self.run = run
        self.steps = steps
        self.clock = clock
        self.names = StepNames(run.key_scheme)
        self.checks = ReplayChecks(
            steps, enabled=run.status != "compensating", branches=self.names.by_branch()
        )

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.run.run_id

    @property
    def workflow(self) -> str:
        """The run's workflow."""
        return self.run.workflow

    async def write_stream(self, key: str, value: Any, *, closed: bool = False) -> None:
        """A dry replay writes nothing."""

    async def set_value(self, key: str, value: Any) -> None:
        """A dry replay writes nothing."""

    async def reply_update(self, wait_key: str, update_id: str, answer: dict[str, Any]) -> None:
        """A dry replay answers nothing."""

    async def _recorded(self, name: str, kind: str, ran: str | None) -> Any:
        return (await self._keyed(name, kind, ran))[1]

    async def _keyed(self, name: str, kind: str, ran: str | None) -> tuple[str, Any]:
        """The step's key and its recorded result, if the record agrees with the code."""
        key = self.checks.place_step(self.names, name)
        if (check := self.checks.reach(key, kind, ran)) is not None:
            await check
        step = self.steps.get(key)
        if step is None or step.status not in ("succeeded", "failed"):
            raise _EndOfRecord()
        if step.status == "failed":
            raise stored_failure(step)
        return key, step.result

    def registered(
        self, kind: Literal["workflow", "step function"], name: str
    ) -> Callable[..., Any] | None:
        # A dry replay reads no declared types of other code: a dispatched step's or a
        # child's value reaches the body as recorded unless the call says ``returns=``.
        """None: a dry replay declares no types of its own."""
        return None

    async def inline_step(
        self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], **options: Any
    ) -> Any:
        """The recorded result, if the record agrees with the code."""
        return await self._recorded(name, "inline", callable_name(fn))

    async def dispatch_step(self, name: str, function: str, payload: Any, **options: Any) -> Any:
        """The recorded result, if the record agrees with the code."""
        return await self._recorded(name, "dispatch", function)

    async def sleep_step(self, name: str, duration: Duration) -> None:
        """Past the sleep, if the record agrees with the code."""
        await self._recorded(name, "sleep", None)

    async def event_step(self, name: str, timeout: Duration | None) -> Any:
        """The recorded payload, if the record agrees with the code."""
        return await self._recorded(name, "event", name)

    async def child_step(self, name: str, workflow: str, input: Any) -> Any:
        """The recorded output, if the record agrees with the code."""
        return await self._recorded(name, "child", workflow)

    async def update_step(self, name: str, timeout: Duration | None) -> UpdateRequest[Any] | None:
        """The recorded update, if the record agrees with the code."""
        key, taken = await self._keyed(name, "update", name)
        return taken_request(self, name, key, taken)

    async def patched(self, patch_id: str) -> bool:
        """As the record says the run went: True where it holds the marker."""
        pid = check_patch_id(patch_id)
        known = self.checks.patches.get(pid)
        if known is None:
            known = has_marker(self.steps, pid) or not await self.checks.behind()
            self.checks.patches[pid] = known
        return known

    async def check(self, body: Callable[..., Any]) -> Divergence | None:
        """Replay ``body``; the divergence it meets, if any."""
        try:
            async with asyncio.timeout(_BODY_TIMEOUT_S):
                what = f"the input of workflow {self.run.workflow!r}"
                data = as_declared(
                    self.run.input, declared_parameter(body, 1), what, step=INPUT_STEP
                )
                ctx = WorkflowContext(self)
                with self.names.body(), running_body(ctx):
                    await body(ctx, data)
        except ValueMismatch as exc:  # a recorded value the code's types no longer take
            return Divergence(self.run_id, exc.step, exc.recorded, exc.found, exc.REASON)
        except (Diverged, _EndOfRecord, Exception):
            pass
        except BaseExceptionGroup as group:
            if (found := _value_mismatch(group)) is not None:
                return Divergence(
                    self.run_id, found.step, found.recorded, found.found, found.REASON
                )
        await self.checks.settle()  # branches still replaying beside the one that ended
        mismatch = self.checks.mismatch
        if mismatch is None:
            return None
        return Divergence(
            self.run_id, mismatch.step, mismatch.recorded, mismatch.found, mismatch.reason
        )


def _value_mismatch(group: BaseExceptionGroup[BaseException]) -> ValueMismatch | None:
    """The first value mismatch raised in a branch of the body (a ``TaskGroup``)."""
    matched, _ = group.split(ValueMismatch)
    while matched is not None:
        first = matched.exceptions[0]
        if isinstance(first, ValueMismatch):
            return first
        matched = first if isinstance(first, BaseExceptionGroup) else None
    return None


async def replay_check(
    store: Store,
    bodies: Callable[[str], Callable[..., Any] | None],
    *,
    workflows: Sequence[str],
    run_ids: Sequence[str] | None,
    limit: int,
    include_ended: bool,
    clock: Clock,
) -> ReplayReport:
    """Replay up to ``limit`` stored runs of ``workflows`` (or the runs ``run_ids``)
    against the registered bodies (on the engine's ``clock``); reads only."""
    report = ReplayReport(checked=0, diverged=[])
    # Replays in flight, oldest first: one that waits for branches of its body to catch
    # up (an apparent swap gives them a moment) waits beside the others and beside the
    # next batch's read, not before them. Reported in the order listed.
    flight: deque[asyncio.Future[Divergence | None]] = deque()
    try:
        async with aclosing(_runs(store, workflows, run_ids, limit, include_ended)) as runs:
            async for batch in runs:
                loaded = await store.load_steps_of([r.run_id for r in batch], lean=True)
                for run in batch:
                    if (body := bodies(run.workflow)) is None:
                        continue
                    replay = DryReplay(run, merged(run, loaded.get(run.run_id, [])), clock)
                    flight.append(asyncio.ensure_future(replay.check(body)))
                    if len(flight) >= _WINDOW:
                        _count(report, await flight.popleft())
        while flight:
            _count(report, await flight.popleft())
    finally:
        for left in flight:
            left.cancel()
    return report


def _count(report: ReplayReport, found: Divergence | None) -> None:
    report.checked += 1
    if found is not None:
        report.diverged.append(found)


async def _runs(
    store: Store,
    workflows: Sequence[str],
    run_ids: Sequence[str] | None,
    limit: int,
    include_ended: bool,
) -> AsyncGenerator[list[RunRecord], None]:
    """The runs to check, in batches, at most ``limit`` of them (the next page of a
    listing read while the batches of this one replay)."""
    left = limit
    if run_ids is not None:  # named runs: ended ones too only with ``include_ended``
        wanted = list(dict.fromkeys(run_ids))[:limit]
        for i in range(0, len(wanted), _BATCH):
            found = await store.get_runs(
                wanted[i : i + _BATCH], status_in=None if include_ended else _LIVE
            )
            yield [r for r in found if r.workflow in workflows]
        return
    statuses: Sequence[str | None] = [None] if include_ended else _LIVE
    for workflow in workflows:
        for status in statuses:

            def page_after(
                after: str | None, asked: int, workflow: str = workflow, status: str | None = status
            ) -> Awaitable[list[RunRecord]]:
                return store.list_runs(
                    workflow=workflow,
                    status=status,
                    limit=asked,
                    after=after,
                    order="oldest",
                    lean=True,
                )

            asked = min(left, _PAGE)
            coming: asyncio.Future[list[RunRecord]] | None
            coming = asyncio.ensure_future(page_after(None, asked))
            try:
                while coming is not None:
                    page = await coming
                    coming = None
                    left -= len(page)
                    if len(page) == asked and left > 0:
                        # The next page is read while this one's runs replay.
                        asked = min(left, _PAGE)
                        coming = asyncio.ensure_future(page_after(page[-1].run_id, asked))
                    for i in range(0, len(page), _BATCH):
                        yield page[i : i + _BATCH]
            finally:
                if coming is not None:
                    coming.cancel()
            if left <= 0:
                return
