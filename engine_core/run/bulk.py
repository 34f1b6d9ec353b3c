"""Acting on many runs at once (``engine.fork_many``, ``cancel_many``, ``retry_many``):
the runs a filter matches are read a page at a time, by run id, and acted on a few at a
time, so a million matching runs cost the memory of one page; the report keeps counts
and a bounded sample."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime

from engine_core.errors import EngineError, StoreUnavailableError
from engine_core.records import RunRecord
from engine_core.store import Store

#: Runs read per page.
PAGE = 200
#: Runs acted on at once.
AT_ONCE = 16
#: Run ids a report keeps (the first ones).
SAMPLE = 100


@dataclass(frozen=True)
class RunFilter:
    """Which runs a bulk action takes: every given criterion must hold. ``error_type``
    matches a run's ``error["type"]`` or, for a run a step failed, the step's
    exception type (``error["error_type"]``)."""

    workflow: str | None = None
    status: str | None = None
    created_since: datetime | None = None
    created_before: datetime | None = None
    error_type: str | None = None

    def takes(self, run: RunRecord) -> bool:
        """Whether ``run`` passes the filters the store cannot apply (the error type)."""
        if self.error_type is None:
            return True
        error = run.error or {}
        return self.error_type in (error.get("type"), error.get("error_type"))


@dataclass
class BulkReport:
    """What a bulk action did: how many runs matched the filter, how many it acted on,
    how many it skipped (a run that changed meanwhile, or that the action refused: the
    first reasons are in ``errors``), and the first ``(run id, new run id or None)``
    pairs it acted on (all matched ones, first ones first, with ``dry_run``)."""

    matched: int = 0
    done: int = 0
    skipped: int = 0
    dry_run: bool = False
    sample: list[tuple[str, str | None]] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)


async def matching(
    store: Store, where: RunFilter, page: int = PAGE
) -> AsyncIterator[list[RunRecord]]:
    """The runs ``where`` takes, a page at a time, by run id (a keyset scan: a run that
    changes status meanwhile is visited at most once)."""
    after: str | None = None
    while True:
        runs = await store.list_runs(
            workflow=where.workflow,
            status=where.status,
            limit=page,
            after=after,
            created_since=where.created_since,
            created_before=where.created_before,
            order="id",
        )
        if not runs:
            return
        after = runs[-1].run_id
        yield [r for r in runs if where.takes(r)]
        if len(runs) < page:
            return


async def act_on_many(
    store: Store,
    where: RunFilter,
    act: Callable[[RunRecord], Awaitable[str | None]],
    *,
    dry_run: bool,
) -> BulkReport:
    """Apply ``act`` (returning a new run's id, or None) to every run ``where`` takes."""
    report = BulkReport(dry_run=dry_run)
    async for runs in matching(store, where):
        report.matched += len(runs)
        if dry_run:
            room = SAMPLE - len(report.sample)
            report.sample.extend((r.run_id, None) for r in runs[:room])
            continue
        for i in range(0, len(runs), AT_ONCE):
            chunk = runs[i : i + AT_ONCE]
            outcomes = await asyncio.gather(*(act(r) for r in chunk), return_exceptions=True)
            for run, outcome in zip(chunk, outcomes, strict=True):
                _count(report, run.run_id, outcome)
    return report


def _count(report: BulkReport, run_id: str, outcome: str | BaseException | None) -> None:
    if isinstance(outcome, BaseException):
        if isinstance(outcome, StoreUnavailableError) or not isinstance(
            outcome, EngineError | ValueError
        ):
            raise outcome  # a store that stayed down, a bug: not a run's own refusal
        report.skipped += 1
        if len(report.errors) < SAMPLE:
            report.errors.append((run_id, str(outcome)))
        return
    report.done += 1
    if len(report.sample) < SAMPLE:
        report.sample.append((run_id, outcome))
