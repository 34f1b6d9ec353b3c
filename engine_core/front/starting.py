"""What ``engine.start`` does with a checked call: check the input against the workflow's
declared type (or, for a workflow registered elsewhere, that a live worker serves it),
record the run, and set it going here when this process can begin it at once."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import engine_core.common.lifecycle_log as lifecycle_log
from engine_core.common.convert import declared_parameter, from_json
from engine_core.common.durations import Duration
from engine_core.common.values import MAX_VALUE_BYTES, check_name, to_stored, value_limit
from engine_core.errors import InvalidInputError, InvalidRunIdError
from engine_core.flow.starts import hold_first_pass, new_run
from engine_core.front.host import Host
from engine_core.mirror import mirror_run
from engine_core.records import RunRecord


async def start_run(
    host: Host,
    call: Callable[[Callable[[], Awaitable[RunRecord | None]]], Awaitable[RunRecord | None]],
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
    """Start a run as :meth:`Engine.start <engine_core.Engine.start>` documents;
    ``call`` makes a store call that waits out an outage up to ``store_timeout``."""
    host = host
    local = workflow in host.workflows
    if local:
        check_input(host.workflows[workflow], workflow, input, value_limit(host.store))
    else:
        # A client by name: some live worker must serve it.
        check_name(workflow, "workflow name")
        names = list(host.workflows)
        await host.outages.call(
            lambda: host.fleet.check_served(workflow, names),
            timeout=host.config.store_timeout,
        )
    run = new_run(
        workflow,
        input,
        run_id=run_id,
        started_by=host.instance_id,
        queues=host.queues,
        queue=queue,
        key=key,
        priority=priority,
        dedup_id=dedup_id,
        delay=delay,
        deadline=deadline,
        limit=value_limit(host.store),
    )
    run.version = host.workflow_version(workflow)
    run.retention = host.retention(workflow)
    adopt = local and run.status == "running" and host.room_to_adopt() > 0
    if adopt:
        hold_first_pass(run, host.instance_id, host.config.lease_ttl)
    # A store outage is waited out, up to ``store_timeout``; then a clear error.
    existing = await call(lambda: host.store.insert_run(run))
    run_id = run.run_id
    if existing is not None:
        if existing.workflow != workflow:
            raise InvalidRunIdError(
                f"run id {run_id!r} already belongs to a run of workflow "
                f"{existing.workflow!r}, not {workflow!r}; choose another id"
            )
        return run_id
    await announce(host, run, adopt=adopt)
    return run_id


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
    if declared is None:
        return
    stored = to_stored(input, f"input of workflow {workflow!r}", limit)
    try:
        from_json(stored, declared)
    except (ValueError, TypeError) as exc:
        listed: Any = getattr(exc, "errors", None)  # pydantic's ValidationError lists them
        name = getattr(declared, "__name__", str(declared))
        raise InvalidInputError(
            f"input of workflow {workflow!r} does not fit {name}: {exc}",
            errors=listed() if callable(listed) else None,
        ) from exc
