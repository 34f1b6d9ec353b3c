"""What ``engine.start`` does with a checked call: check the input against the workflow's
declared type (or, for a workflow registered elsewhere, that a live worker serves it),
record the run, and set it going here when this process can begin it at once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any, TypeVar

import engine_core.common.lifecycle_log as lifecycle_log
from engine_core.common.clock import real_seconds
from engine_core.common.convert import declared_parameter
from engine_core.common.durations import Duration
from engine_core.common.values import (
    MAX_VALUE_BYTES,
    check_name,
    check_run_id,
    to_stored,
    value_limit,
)
from engine_core.errors import DuplicateRunError, InvalidRunIdError, StoreUnavailableError
from engine_core.fleet.schemas import check_input_schema
from engine_core.flow.debounce import Debounce
from engine_core.flow.queue_figures import limits_of
from engine_core.flow.starts import hold_first_pass, new_run
from engine_core.front.host import Host
from engine_core.mirror import mirror_run
from engine_core.records import TERMINAL, RunRecord
from engine_core.run.mismatch import read_input

_T = TypeVar("_T")
#: A store call of one start, waiting out an outage within the start's ``store_timeout``.
_Call = Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]]


async def start_run(
    host: Host,
    workflow: str,
    input: Any,
    *,
    run_id: str | None,
    queue: str | None,
    key: str | None,
    priority: int,
    dedup_id: str | None,
    delay: Duration | None,
    deadline: Duration | None,
    debounce: Debounce | None = None,
    on_duplicate: str = "raise",
) -> str:
    """Start a run as :meth:`Engine.start <engine_core.Engine.start>` documents, its
    store calls waiting out an outage for ``store_timeout`` in all.

    The run's id is fixed before the first try (a generated one too), so a try
    repeated after a lost reply finds the run it recorded; a start that gives up raises
    :class:`StoreUnavailableError` carrying ``run_id``, to start again with safely."""
    run_id = check_run_id(run_id) if run_id is not None else uuid.uuid4().hex
    timeout = host.config.store_timeout
    ends = real_seconds() + timeout

    async def call(fn: Callable[[], Awaitable[_T]]) -> _T:
        left = max(0.001, ends - real_seconds())
        return await host.outages.call(fn, timeout=left, watched=True)

    try:
        run, adopt = await _planned(host, call, workflow, input, run_id, queue=queue, key=key,
                                    priority=priority, dedup_id=dedup_id, delay=delay,
                                    deadline=deadline, may_adopt=debounce is None)  # fmt: skip
    except StoreUnavailableError as exc:
        raise StoreUnavailableError(
            f"{exc}; run {run_id!r} was not recorded: start it again (with "
            f"run_id={run_id!r}, it starts at most once)",
            run_id=run_id,
        ) from exc
    if debounce is not None:
        return await start_debounced(host, call, run, debounce)
    try:
        existing = await _insert(host, call, run)
    except DuplicateRunError as exc:
        if on_duplicate == "return":
            return exc.run_id
        if on_duplicate != "cancel":
            raise
        existing = await insert_replacing(host, call, run, exc.run_id)
    if existing is not None and existing.wire.get("traceparent") != run.wire["traceparent"]:
        if existing.workflow != workflow:
            raise InvalidRunIdError(
                f"run id {run_id!r} already belongs to a run of workflow "
                f"{existing.workflow!r}, not {workflow!r}; choose another id"
            )
        return run_id
    # Recorded now, or by an earlier try of this call whose reply was lost.
    await announce(host, run, adopt=adopt)
    return run_id


async def _insert(host: Host, call: _Call, run: RunRecord) -> RunRecord | None:
    """Insert ``run``: None, or the run that holds its id (this call's own, when an
    earlier try landed and its reply was lost)."""
    run_id = run.run_id
    try:
        existing: RunRecord | None = await call(lambda: host.store.insert_run(run))
    except DuplicateRunError as exc:
        if exc.run_id != run_id:
            raise
        existing = await call(lambda: host.store.get_run(run_id))  # our own, recorded
    except StoreUnavailableError as exc:
        raise StoreUnavailableError(
            f"{exc}; whether run {run_id!r} was recorded is unknown (the store may have "
            f"taken the start without its reply coming back): call start again with "
            f"run_id={run_id!r}: it returns that id if the run was recorded, else starts "
            "it, once",
            run_id=run_id,
        ) from exc
    return existing


async def _planned(
    host: Host,
    call: _Call,
    workflow: str,
    input: Any,
    run_id: str,
    *,
    may_adopt: bool,
    **flow: Any,
) -> tuple[RunRecord, bool]:
    """The run to insert, checked (and whether this process begins its first pass in
    the insert, when it ``may_adopt``): ``input`` against the workflow's type, or by
    name against what the fleet serves; ``queue`` declared here or by the fleet."""
    local = workflow in host.workflows
    version = host.workflow_version(workflow)
    limit = value_limit(host.store)
    if local:
        stored = check_input(host.workflows[workflow], workflow, input, limit)
    else:
        # A client by name: some live worker must serve it. The run takes the version
        # of the one that started last (so a pinned fleet drives it) and the input is
        # checked against the schema it publishes.
        check_name(workflow, "workflow name")
        names = list(host.workflows)
        serving = await call(lambda: host.fleet.serving(workflow, names))
        version = serving.workflow_versions.get(workflow)
        stored = to_stored(input, f"input of workflow {workflow!r}", limit)
        check_input_schema(workflow, serving.input_schemas.get(workflow), stored)
    queues = host.queues
    queue = flow["queue"]
    if isinstance(queue, str) and queue not in queues:
        # Not declared here: a queue the fleet declared (its limits are stored, or a
        # live worker declares it) takes the start all the same.
        found = await call(lambda: host.fleet.queue_limits(queue))
        if found is not None:
            queues = {**queues, queue: limits_of(queue, found)}
    run = new_run(workflow, stored, run_id=run_id, started_by=host.instance_id, queues=queues,
                  now=host.clock.now(), **flow)  # fmt: skip
    run.version = version
    run.retention = host.retention(workflow)
    adopt = may_adopt and local and run.status == "running" and host.room_to_adopt() > 0
    if adopt:
        hold_first_pass(run, host.instance_id, host.config.lease_ttl)
    return run, adopt


async def start_debounced(host: Host, call: _Call, run: RunRecord, debounce: Debounce) -> str:
    """Record a debounced start: the pending run of its workflow and key, joined or
    made (see ``Store.debounce_run``). This process arms a timer for the run's new
    due time (which fires, then looks again in case a later start moved it)."""
    run.status, run.pending_pass, run.debounce_key = "queued", False, debounce.key
    found: tuple[str, bool] = await call(
        lambda: host.store.debounce_run(run, quiet=debounce.quiet, timeout=debounce.timeout)
    )
    run_id, created = found
    pending = replace(
        run, run_id=run_id, not_before=host.clock.now() + timedelta(seconds=debounce.quiet)
    )
    if created:
        await announce(host, pending)
    elif host.serving:
        host.run_timers.arm(pending)
    return run_id


async def insert_replacing(
    host: Host, call: _Call, run: RunRecord, holder: str
) -> RunRecord | None:
    """``on_duplicate="cancel"``: cancel the live run holding ``run``'s dedup id (with
    its children) and insert ``run`` in its place, as :func:`_insert` does; again while
    another start took the id first. Of concurrent such starts each cancels the holder
    it finds, and the store's claim lets one insert at a time, so one run is left live."""
    pause = 0.01
    while True:
        if not await stop_holder(host, call, run, holder):
            # Claimed by a start that has not inserted its run yet: wait for it.
            await asyncio.sleep(pause)
            pause = min(2 * pause, 1.0)
        try:
            return await _insert(host, call, run)
        except DuplicateRunError as exc:
            holder = exc.run_id


async def stop_holder(host: Host, call: _Call, run: RunRecord, holder: str) -> bool:
    """Cancel ``holder`` (holding ``run``'s dedup id) unless it has ended; False when it
    does not exist yet. :class:`DuplicateRunError` when it cannot be cancelled."""
    found: RunRecord | None = await call(lambda: host.store.get_run(holder))
    if found is None:
        return False
    if found.status == "compensating":
        raise DuplicateRunError(
            f"run {holder!r} holds dedup id {run.dedup_id!r} and is compensating: it "
            "cannot be cancelled (on_duplicate='cancel'); start again once it has ended",
            run_id=holder,
        )
    if found.status not in TERMINAL:
        error = {
            "type": "WorkflowRunCancelledError",
            "message": f"run {holder!r} was cancelled: run {run.run_id!r} replaced it "
            f"(dedup id {run.dedup_id!r}, on_duplicate='cancel')",
        }
        await call(lambda: host.control.cancel(holder, error=error))
    return True


async def announce(host: Host, run: RunRecord, *, adopt: bool = False) -> None:
    """After ``run`` was recorded (started, or forked): log and mirror it, arm its
    timers, and set it going here (``adopt``: its first pass is held already)."""
    lifecycle_log.run_started(run)
    await mirror_run(host.mirror, run)
    if host.serving and (run.not_before is not None or run.deadline_at is not None):
        host.run_timers.arm(run)
    if run.status == "queued":
        if run.not_before is None and run.queue is not None:
            host.joined_line(run.queue)
    elif adopt:
        host.adopt(run)
    elif run.workflow in host.workflows:
        host.kick(run.run_id)


async def record_for_fleet(
    host: Host,
    call: Callable[[Callable[[], Awaitable[RunRecord | None]]], Awaitable[RunRecord | None]],
    workflow: str,
    input: Any,
    run_id: str,
) -> str:
    """Record a run of ``workflow`` (registered elsewhere, perhaps nowhere yet) for the
    fleet to drive, without checking that any live worker serves it."""
    run = new_run(
        workflow,
        to_stored(input, f"input of workflow {workflow!r}", value_limit(host.store)),
        run_id=run_id,
        started_by=host.instance_id,
        queues=host.queues,
        now=host.clock.now(),
    )
    run.retention = host.retention(workflow)
    await call(lambda: host.store.insert_run(run))
    return run_id


def check_input(
    fn: Callable[..., Any], workflow: str, input: Any, limit: int = MAX_VALUE_BYTES
) -> Any:
    """``input`` as stored, which must fit the type ``fn`` declares for it:
    :class:`InvalidInputError` (and be no larger than ``limit``:
    :class:`ValueTooLargeError`)."""
    stored = to_stored(input, f"input of workflow {workflow!r}", limit)
    declared = declared_parameter(fn, 1)
    if declared is not None:
        read_input(workflow, stored, declared)
    return stored
