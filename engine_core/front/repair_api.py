"""The repair half of the engine's API (docs/guides/repair.md): fork a run from a step, and fork,
cancel or retry many runs at once. A mixin of :class:`Engine`, kept apart so the facade
stays one screen per concern."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from engine_core.common.status import ForkPlan
from engine_core.common.values import (
    check_moment,
    check_name,
    check_run_id,
    to_stored,
    value_limit,
)
from engine_core.errors import InvalidRunIdError
from engine_core.front.host import Host
from engine_core.front.starting import announce, check_input
from engine_core.records import STOPPABLE, RunRecord
from engine_core.run.bulk import BulkReport, RunFilter, act_on_many
from engine_core.run.control import RunControl
from engine_core.run.fork import UNCHANGED, describe_fork, plan_fork

_T = TypeVar("_T")
#: The most fork ids ``list_forks`` returns (and ``RunStatus.forks`` counts).
MAX_FORKS = 10_000


class RepairApi:
    """Fork one run; fork, cancel or retry the runs a filter matches."""

    _host: Host
    _control: RunControl

    if TYPE_CHECKING:

        async def _call(self, fn: Callable[[], Awaitable[_T]], *, again: bool = True) -> _T: ...

    async def fork(
        self,
        run_id: str,
        *,
        from_step: str | None = None,
        new_run_id: str | None = None,
        input: Any = UNCHANGED,
        keep_idempotency_keys: bool = False,
    ) -> str:
        """Start a new run of the run's workflow, queue and version that reuses the steps
        the run finished before ``from_step`` (by the order it first started them;
        default: the step that failed it, else its first step) and runs ``from_step``
        and every later step anew; returns its id. Any run can be forked, ended or not;
        the original is untouched. Copied steps keep their results, not their
        compensations; finished child steps are reused (no child starts again).

        Steps that run again get new idempotency keys (they belong to a new run);
        ``keep_idempotency_keys=True`` gives them the original's, for a provider that
        must see the same key. ``new_run_id`` makes the fork start-once: called again,
        it returns that id and forks nothing. ``input`` replaces the original's input.
        Raises :class:`RunNotFoundError` for an unknown run, :class:`StepNotFoundError`
        for an unknown ``from_step``, and :class:`DuplicateRunError` while a run that has
        not ended holds the original's dedup id (cancel it, or wait for it to end)."""
        check_run_id(run_id)
        if from_step is not None:
            check_name(from_step, "step key")
        fork_id = check_run_id(new_run_id) if new_run_id is not None else uuid.uuid4().hex
        return await self._call(
            lambda: self._fork(
                run_id, from_step, fork_id, input, keep_idempotency_keys, named=bool(new_run_id)
            )
        )

    async def _fork(
        self,
        run_id: str,
        from_step: str | None,
        fork_id: str,
        input: Any,
        keep: bool,
        *,
        named: bool,
        run: RunRecord | None = None,
    ) -> str:
        host, store = self._host, self._host.store
        if named and (made := await store.get_run(fork_id)) is not None:
            return _made_by(made, run_id)
        run = run or await self._control.get(run_id)
        if input is not UNCHANGED:
            if run.workflow in host.workflows:
                input = check_input(
                    host.workflows[run.workflow], run.workflow, input, value_limit(store)
                )
            else:
                input = to_stored(input, f"input of workflow {run.workflow!r}", value_limit(store))
        fork, steps = plan_fork(
            run,
            await store.load_steps(run.run_id),
            from_step=from_step,
            fork_id=fork_id,
            input=input,
            started_by=host.instance_id,
            keep_idempotency_keys=keep,
            now=host.clock.now(),
        )
        existing = await store.fork_run(fork, steps)
        if existing is not None:
            return _made_by(existing, run_id)
        await announce(host, fork)
        return fork_id

    async def fork_plan(self, run_id: str, *, from_step: str | None = None) -> ForkPlan:
        """What :meth:`fork` with ``from_step`` would do, changing nothing: the step it
        runs anew from, the steps it copies and those that run again (a step whose
        compensation ran is never copied). Raises as :meth:`fork` does."""
        check_run_id(run_id)
        if from_step is not None:
            check_name(from_step, "step key")

        async def plan() -> ForkPlan:
            run = await self._control.get(run_id)
            stored = await self._host.store.load_steps(run_id)
            return describe_fork(run, stored, from_step=from_step)

        return await self._call(plan)

    async def list_forks(self, run_id: str) -> list[str]:
        """The ids of the runs forked from this run, oldest first (at most 10,000)."""
        check_run_id(run_id)
        return await self._call(lambda: self._host.store.list_forks(run_id, limit=MAX_FORKS))

    async def fork_many(
        self,
        *,
        workflow: str | None = None,
        status: str | None = None,
        created_since: datetime | None = None,
        created_before: datetime | None = None,
        error_type: str | None = None,
        from_step: str | None = None,
        keep_idempotency_keys: bool = False,
        dry_run: bool = False,
    ) -> BulkReport:
        """:meth:`fork` every run the filter matches (``workflow``, ``status``, created
        in [``created_since``, ``created_before``), ``error_type``: the run's error type
        or, for a run a step failed, the step's exception type), from ``from_step`` or
        from its failure. Reads the runs a page at a time (bounded memory whatever
        matches). ``dry_run``: count them and list the first ids, changing nothing."""
        # Never the forks this call makes: only runs created before it began.
        now = self._host.clock.now()
        before = now if created_before is None else min(created_before, now)
        where = _filter(workflow, status, created_since, before, error_type)
        _check_some(workflow, status, created_since, created_before, error_type)

        async def act(run: RunRecord) -> str | None:
            fork_id = uuid.uuid4().hex  # chosen once: a repeat after a lost reply reuses it
            return await self._call(
                lambda: self._fork(
                    run.run_id,
                    from_step,
                    fork_id,
                    UNCHANGED,
                    keep_idempotency_keys,
                    named=False,
                    run=run,
                )
            )

        return await act_on_many(self._host.store, where, act, dry_run=dry_run)

    async def cancel_many(
        self,
        *,
        workflow: str | None = None,
        status: str | None = None,
        created_since: datetime | None = None,
        created_before: datetime | None = None,
        error_type: str | None = None,
        compensate: bool = False,
        dry_run: bool = False,
    ) -> BulkReport:
        """:meth:`cancel` every run the filter matches (as :meth:`fork_many`) that has not
        ended (``status``: one of queued, running, suspended; default: all three)."""
        if status is not None and status not in STOPPABLE:
            raise ValueError(
                f"a {status} run cannot be cancelled: cancel_many takes runs that are "
                f"{', '.join(STOPPABLE)} (pass one of those as status, or none for all three)"
            )
        _check_some(workflow, status, created_since, created_before, error_type)
        report = BulkReport(dry_run=dry_run)
        for state in [status] if status is not None else list(STOPPABLE):
            where = _filter(workflow, state, created_since, created_before, error_type)

            async def act(run: RunRecord) -> str | None:
                await self._call(lambda: self._control.cancel(run.run_id, compensate=compensate))
                return None

            _add(report, await act_on_many(self._host.store, where, act, dry_run=dry_run))
        return report

    async def retry_many(
        self,
        *,
        workflow: str | None = None,
        status: str | None = None,
        created_since: datetime | None = None,
        created_before: datetime | None = None,
        error_type: str | None = None,
        dry_run: bool = False,
    ) -> BulkReport:
        """:meth:`retry` every ``failed`` run the filter matches (as :meth:`fork_many`;
        ``status``, when given, must be ``"failed"``: only a failed run can be retried)."""
        if status is not None and status != "failed":
            raise ValueError(
                f"a {status} run cannot be retried: retry_many takes failed runs "
                "(pass status='failed', or no status)"
            )
        where = _filter(workflow, "failed", created_since, created_before, error_type)

        async def act(run: RunRecord) -> str | None:
            await self._call(lambda: self._control.retry(run.run_id), again=False)
            return None

        return await act_on_many(self._host.store, where, act, dry_run=dry_run)


def _made_by(run: RunRecord, original: str) -> str:
    """The id of ``run``, a fork of ``original`` made earlier by the same call (the
    start-once ``new_run_id``); any other run holding the id is an error."""
    if run.forked_from is None or run.forked_from.get("run_id") != original:
        raise InvalidRunIdError(
            f"run id {run.run_id!r} already belongs to another run (not a fork of "
            f"{original!r}); choose another new_run_id"
        )
    return run.run_id


def _filter(
    workflow: str | None,
    status: str | None,
    created_since: datetime | None,
    created_before: datetime | None,
    error_type: str | None,
) -> RunFilter:
    if workflow is not None:
        check_name(workflow, "workflow name")
    check_moment(created_since, "created_since")
    check_moment(created_before, "created_before")
    return RunFilter(workflow, status, created_since, created_before, error_type)


def _check_some(*criteria: object) -> None:
    """A bulk action over every run is never what a missing argument meant."""
    if all(c is None for c in criteria):
        raise ValueError(
            "pass a filter (workflow, status, created_since, created_before or "
            "error_type): a bulk action never takes every run by default"
        )


def _add(total: BulkReport, part: BulkReport) -> None:
    total.matched += part.matched
    total.done += part.done
    total.skipped += part.skipped
    total.sample.extend(part.sample[: max(0, 100 - len(total.sample))])
    total.errors.extend(part.errors[: max(0, 100 - len(total.errors))])
