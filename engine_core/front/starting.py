"""What ``engine.start`` does with a checked call: check the input against the workflow's
declared type (or, for a workflow registered elsewhere, that a live worker serves it),
record the run, and set it going here when this process can begin it at once."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import engine_core.common.lifecycle_log as lifecycle_log
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
from engine_core.flow.queue_figures import limits_of
from engine_core.flow.starts import hold_first_pass, new_run
from engine_core.front.host import Host
from engine_core.mirror import mirror_run
from engine_core.records import RunRecord
from engine_core.run.mismatch import read_input

_T = TypeVar("_T")


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
) -> str:
    """Start a run as :meth:`Engine.start <engine_core.Engine.start>` documents, its
    store calls waiting out an outage for ``store_timeout`` in all.

    The run's id is fixed before the first try (a generated one too), so a try
    repeated after a lost reply finds the run it recorded; a start that gives up raises
    :class:`StoreUnavailableError` carrying ``run_id``, to start again with safely."""
    run_id = check_run_id(run_id) if run_id is not None else uuid.uuid4().hex
    timeout = host.config.store_timeout
    ends = time.monotonic() + timeout

    async def call(fn: Callable[[], Awaitable[_T]]) -> _T:
        left = max(0.001, ends - time.monotonic())
        return await host.outages.call(fn, timeout=left, watched=True)

    try:
        run, adopt = await _planned(host, call, workflow, input, run_id, queue=queue, key=key,
                                    priority=priority, dedup_id=dedup_id, delay=delay,
                                    deadline=deadline)  # fmt: skip
    except StoreUnavailableError as exc:
        raise StoreUnavailableError(
            f"{exc}; run {run_id!r} was not recorded: start it again (with "
            f"run_id={run_id!r}, it starts at most once)",
            run_id=run_id,
        ) from exc
    existing = await _insert(host, call, run)
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


async def _insert(
    host: Host, call: Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]], run: RunRecord
) -> RunRecord | None:
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
    call: Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]],
    workflow: str,
    input: Any,
    run_id: str,
    **flow: Any,
) -> tuple[RunRecord, bool]:
    """The run to insert, checked (and whether this process begins its first pass in
    the insert): ``input`` against the workflow's type, or by name against what the
    fleet serves; ``queue`` declared here or by the fleet."""
    local = workflow in host.workflows
    version = host.workflow_version(workflow)
    limit = value_limit(host.store)
    if local:
        check_input(host.workflows[workflow], workflow, input, limit)
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
    run = new_run(workflow, input, run_id=run_id, started_by=host.instance_id, queues=queues,
                  limit=limit, **flow)  # fmt: skip
    run.version = version
    run.retention = host.retention(workflow)
    adopt = local and run.status == "running" and host.room_to_adopt() > 0
    if adopt:
        hold_first_pass(run, host.instance_id, host.config.lease_ttl)
    return run, adopt


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
        input,
        run_id=run_id,
        started_by=host.instance_id,
        queues=host.queues,
        limit=value_limit(host.store),
    )
    run.retention = host.retention(workflow)
    await call(lambda: host.store.insert_run(run))
    return run_id


def check_input(
    fn: Callable[..., Any], workflow: str, input: Any, limit: int = MAX_VALUE_BYTES
) -> None:
    """``input`` must fit the type ``fn`` declares for it: :class:`InvalidInputError`
    (and be no larger than ``limit``: :class:`ValueTooLargeError`)."""
    declared = declared_parameter(fn, 1)
    if declared is not None:
        stored = to_stored(input, f"input of workflow {workflow!r}", limit)
        read_input(workflow, stored, declared)
