"""Run control: stopping and restarting runs, how a run ends, child runs, triggers.

Everything that changes a run from outside its passes is here: cancel, suspend,
resume and retry; what happens when a run ends (its mirror, its waiters, its parent's
step); starting, cancelling and reconciling child runs; and telling a run it is owed a
pass.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import engine_core.common.lifecycle_log as lifecycle_log
from engine_core.common.runtime import Runtime
from engine_core.common.values import check_name, check_run_id, to_stored, value_limit
from engine_core.errors import RunNotActiveError, RunNotFoundError
from engine_core.mirror import mirror_run, mirror_step
from engine_core.records import (
    STOPPABLE,
    TERMINAL,
    EventRecord,
    RunRecord,
    RunState,
    StepRecord,
)
from engine_core.run.keys import CURRENT_SCHEME
from engine_core.run.reentry import check_dedup_free, reenter
from engine_core.run.transitions import child_ended, retried, told, write
from engine_core.store import Store

log = logging.getLogger("engine_core")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)


def expiry(runtime: Runtime, run: RunRecord) -> datetime | None:
    """When ``run``, ending now, may be deleted (its retention, see
    ``Runtime.retention``), or None: kept until pruned."""
    kept = runtime.retention(run.workflow, run.retention)
    return None if kept is None else runtime.clock.now() + timedelta(seconds=kept)


def cancelled_error(run_id: str) -> dict[str, Any]:
    """The error a cancelled run carries."""
    return {"type": "WorkflowRunCancelledError", "message": f"run {run_id!r} was cancelled"}


class RunControl:
    """Acts on runs through the store, for the client API and for passes."""

    def __init__(self, store: Store, runtime: Runtime) -> None:
        self.store = store
        self.runtime = runtime

    async def get(self, run_id: str) -> RunRecord:
        """The run, or :class:`RunNotFoundError`."""
        run = await self.store.get_run(check_run_id(run_id))
        if run is None:
            raise RunNotFoundError(f"no run has id {run_id!r}")
        return run

    async def send_event(self, run_id: str, name: str, payload: Any) -> None:
        """Keep event ``name`` for the run and tell the run; :class:`RunNotActiveError`
        (storing nothing) when the run has ended."""
        run = await self.get(run_id)
        check_name(name, "event name")
        if run.status in TERMINAL:
            raise RunNotActiveError(
                f"run {run_id!r} has ended ({run.status}); it takes no more events",
                run_id=run_id,
                status=run.status,
            )
        now = self.runtime.clock.now()
        event = EventRecord(
            # Ordered by sending time first (in nanoseconds, to the microsecond), so
            # waits consume events oldest first.
            event_id=f"{(now - _EPOCH) // _ONE_US * 1000:020d}-{uuid.uuid4().hex[:12]}",
            run_id=run.run_id,
            name=name,
            payload=to_stored(payload, f"payload of event {name!r}", value_limit(self.store)),
            created_at=now,
        )
        await self.store.insert_event(event)
        await self.trigger(run_id)

    async def delete_finished(self, before: datetime, batch: int) -> int:
        """Delete terminal runs last updated before ``before`` (with their steps and
        events), ``batch`` at a time; how many."""
        total = 0
        while True:
            deleted = await self.store.delete_runs(finished_before=before, limit=batch)
            total += deleted
            if deleted < batch:
                return total

    # ---- owed passes -------------------------------------------------------------

    async def trigger(self, run_id: str) -> None:
        """Note that the run is owed a pass and, when serving, try to give it one here."""
        await self.store.request_pass(run_id)
        self.runtime.kick(run_id)

    async def notify_run(self, run_id: str, key: str) -> None:
        """Tell a run that its step settled outside its passes, then mark the step told.

        The step is written ``notified=False`` first, so a crash between the two leaves
        a trace that recovery finds and repairs.
        """
        await self.store.request_pass(run_id, changed=key)
        self.runtime.kick(run_id)
        await write(self.store, run_id, key, told())

    # ---- stopping and restarting -----------------------------------------------

    async def cancel(
        self, run_id: str, *, compensate: bool = False, error: dict[str, Any] | None = None
    ) -> None:
        """Stop the run and its children; ``error`` is what the run records (a plain
        cancel by default). A queued run has nothing to compensate: it is cancelled."""
        run = await self.get(run_id)
        compensate = compensate and run.status != "queued"
        target: RunState = "compensating" if compensate else "cancelled"
        error = error or cancelled_error(run_id)
        updated = await self.store.set_run_status(
            run.run_id,
            target,
            expect=STOPPABLE,
            error=error,
            request_pass=compensate,
            expire_at=None if compensate else expiry(self.runtime, run),
        )
        if updated is None:
            # Stopped already, maybe by an earlier cancel that did not get to its end
            # (its process died, or its reply was lost): finish what it started.
            latest = await self.store.get_run(run_id)
            if latest is not None and latest.status == target:
                await self._stop_below(run_id, compensate)
            return
        await mirror_run(self.runtime.mirror, updated)
        await self._stop_below(run_id, compensate)
        if compensate:
            self.runtime.kick(run_id)
        else:
            await self.run_ended(updated, "cancelled", None, error)

    async def _stop_below(self, run_id: str, compensate: bool) -> None:
        """A cancelled run's queue jobs start no more, and its children are cancelled."""
        await self.store.halt_steps(run_id, True)
        for child in await self.store.list_child_runs(run_id):
            if child.status not in TERMINAL:
                await self.cancel(child.run_id, compensate=compensate)

    async def suspend(self, run_id: str) -> None:
        """``engine.suspend``: a running run stops at its next step boundary and waits for
        ``resume``."""
        run = await self.get(run_id)
        updated = await self.store.set_run_status(run.run_id, "suspended", expect=("running",))
        if updated is not None:
            await mirror_run(self.runtime.mirror, updated)
            await self.halt_suspended(run_id)

    async def halt_suspended(self, run_id: str) -> None:
        """After the write that suspended the run: its queue jobs start no more until it
        is resumed (and a resume that raced the halt is reconciled)."""
        await self.store.halt_steps(run_id, True)
        await self.reconcile_halt(run_id)

    async def resume(self, run_id: str) -> None:
        """``engine.resume``: a suspended run runs again (a pass is owed)."""
        run = await self.get(run_id)
        updated = await self.store.set_run_status(
            run.run_id, "running", expect=("suspended",), request_pass=True
        )
        if updated is not None:
            await mirror_run(self.runtime.mirror, updated)
            await self.unhalt(run_id)
            self.runtime.kick(run_id)

    async def retry(self, run_id: str) -> None:
        """A failed run goes live again from its failed step, re-entering its queue,
        dedup id and deadline as a start would (see ``engine_core.run.reentry``)."""
        run = await self.get(run_id)
        if run.status != "failed":
            raise ValueError(
                f"run {run_id!r} is {run.status}; only a failed run can be retried "
                "(engine.fork repairs a run in any status: a new run reusing its finished steps)"
            )
        await check_dedup_free(self.store, run)  # before anything is written
        if run.journal:
            # The failed step's outcome may be in the journal only: copy it out first.
            await self.store.save_steps(list(run.journal.values()))
        failed_step = (run.error or {}).get("step")
        if isinstance(failed_step, str):
            step = await self.store.get_step(run_id, failed_step)
            if step is not None and step.status == "failed":
                # A dispatched step of a run waiting for admission stays halted: the
                # run's first pass after admission puts it back in reach of workers.
                halt = run.queue is not None
                again = retried(step, halted=halt, now=self.runtime.clock.now())
                await write(self.store, run_id, failed_step, again)
        await reenter(self.store, self.runtime, run, expect=("failed",), forget=list(run.journal))

    async def unhalt(self, run_id: str) -> None:
        """Make the run's queue jobs claimable again, and tell the worker."""
        await self.store.halt_steps(run_id, False)
        self.runtime.work_arrived()

    async def reconcile_halt(self, run_id: str) -> None:
        """After halting jobs of a run that was stopped: a resume that raced the halt may
        have unhalted before the halt landed, leaving a running run with halted jobs."""
        latest = await self.store.get_run(run_id)
        if latest is not None and latest.status == "running":
            await self.unhalt(run_id)

    # ---- endings -----------------------------------------------------------------

    async def run_ended(
        self, run: RunRecord, status: RunState, output: Any, error: dict[str, Any] | None
    ) -> None:
        """After a run moved to ``status`` in the store: mirror it; when terminal, settle its
        parent's step and wake local waiters."""
        ended = replace(run, status=status, output=output, error=error, inflight={}, journal={})
        await mirror_run(self.runtime.mirror, ended)
        if status in TERMINAL:
            lifecycle_log.run_ended(run, status, error, self.runtime.clock.now)
            self.runtime.run_settled(ended)
        elif status == "suspended":
            self.runtime.run_stopped(ended)
        if run.parent_run_id is None or run.parent_step is None or status not in TERMINAL:
            return
        await self.settle_parent_step(
            run.parent_run_id, run.parent_step, run.run_id, status, output, error
        )

    async def settle_parent_step(
        self,
        parent_id: str,
        parent_step: str,
        child_id: str,
        status: str,
        output: Any,
        error: dict[str, Any] | None,
    ) -> StepRecord | None:
        """Settle the parent's child step with how the child ended, and tell the parent.
        Returns the step as stored afterwards."""
        ended = child_ended(child_id, status, output, error, now=self.runtime.clock.now())
        landed = await write(self.store, parent_id, parent_step, ended)
        if landed:
            await self.notify_run(parent_id, parent_step)
        settled = await self.store.get_step(parent_id, parent_step)
        if landed and settled is not None:
            await mirror_step(self.runtime.mirror, settled)
        return settled

    # ---- child runs --------------------------------------------------------------

    async def start_child(
        self, parent: RunRecord, key: str, child_id: str, workflow: str, input: Any
    ) -> None:
        """Start the child run ``child_id`` of ``parent`` (its step ``key``), idempotently."""
        now = self.runtime.clock.now()
        child = RunRecord(
            run_id=child_id,
            workflow=workflow,
            version=self.runtime.workflow_version(workflow),
            retention=self.runtime.retention(workflow),
            status="running",
            input=input,
            created_at=now,
            updated_at=now,
            parent_run_id=parent.run_id,
            parent_step=key,
            key_scheme=CURRENT_SCHEME,
            wire={
                "traceparent": parent.wire.get("traceparent"),
                "started_by": self.runtime.instance_id,
            },
        )
        if await self.store.insert_run(child) is None:
            lifecycle_log.run_started(child)
            # A cancel of the parent that listed its children before this one existed
            # must still reach it: the parent's status was written before that listing.
            latest = await self.store.get_run(parent.run_id)
            if latest is not None and latest.status in ("cancelled", "compensating"):
                await self.cancel(child_id, compensate=latest.status == "compensating")
                return
            self.runtime.kick(child_id)

    async def reconcile_child(self, parent: RunRecord, step: StepRecord) -> StepRecord | None:
        """Settle a child step whose child ended unnoticed; recreate a lost child.
        Returns the settled step, or None while the child is still going."""
        assert step.child_run_id is not None
        child = await self.store.get_run(step.child_run_id)
        if child is None:
            await self.start_child(
                parent, step.key, step.child_run_id, step.function or "", step.payload
            )
            return None
        if child.status not in TERMINAL:
            return None
        settled = await self.settle_parent_step(
            parent.run_id, step.key, child.run_id, child.status, child.output, child.error
        )
        if settled is not None and settled.status in ("succeeded", "failed"):
            return settled
        return None
