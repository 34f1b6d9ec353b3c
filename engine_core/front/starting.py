"""What ``engine.start`` does with a checked call: check the input against the workflow's
declared type (or, for a workflow registered elsewhere, that a live worker serves it),
record the run, and set it going here when this process can begin it at once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any, Protocol, TypeVar

import engine_core.common.lifecycle_log as lifecycle_log
from engine_core.common.convert import declared_parameter, from_json
from engine_core.common.durations import Duration
from engine_core.common.values import check_name, to_stored
from engine_core.errors import DuplicateRunError, InvalidInputError, InvalidRunIdError
from engine_core.flow.debounce import Debounce
from engine_core.flow.starts import hold_first_pass, new_run
from engine_core.front.host import Host
from engine_core.mirror import mirror_run
from engine_core.records import TERMINAL, RunRecord, utcnow

T = TypeVar("T")


class StoreCall(Protocol):
    """A store call that waits out an outage up to ``store_timeout`` (the Engine's)."""

    def __call__(self, fn: Callable[[], Awaitable[T]], *, again: bool = True) -> Awaitable[T]: ...


async def start_run(
    host: Host,
    call: StoreCall,
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
    """Start a run as :meth:`Engine.start <engine_core.Engine.start>` documents;
    ``call`` makes a store call that waits out an outage up to ``store_timeout``."""
    local = await check_start(host, workflow, input)
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
    )
    run.version = host.workflow_version(workflow)
    if debounce is not None:
        return await start_debounced(host, call, run, debounce)
    adopt = local and run.status == "running" and host.room_to_adopt() > 0
    if adopt:
        hold_first_pass(run, host.instance_id, host.config.lease_ttl)
    # A store outage is waited out, up to ``store_timeout``; then a clear error.
    try:
        existing = await call(lambda: host.store.insert_run(run))
    except DuplicateRunError as exc:
        if on_duplicate == "return":
            return exc.run_id
        if on_duplicate != "cancel":
            raise
        existing = await insert_replacing(host, call, run, exc.run_id)
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


async def check_start(host: Host, workflow: str, input: Any) -> bool:
    """Check the input against the workflow's declared type, or, for a workflow this
    process did not register, that a live worker serves it; whether it is registered
    here."""
    if workflow in host.workflows:
        check_input(host.workflows[workflow], workflow, input)
        return True
    # A client by name: some live worker must serve it.
    check_name(workflow, "workflow name")
    names = list(host.workflows)
    await host.outages.call(
        lambda: host.fleet.check_served(workflow, names),
        timeout=host.config.store_timeout,
    )
    return False


async def start_debounced(host: Host, call: StoreCall, run: RunRecord, debounce: Debounce) -> str:
    """Record a debounced start: the pending run of its workflow and key, joined or
    made (see ``Store.debounce_run``). This process arms a timer for the run's new
    due time (which fires, then looks again in case a later start moved it)."""
    run.status, run.pending_pass, run.debounce_key = "queued", False, debounce.key
    run_id, created = await call(
        lambda: host.store.debounce_run(run, quiet=debounce.quiet, timeout=debounce.timeout)
    )
    pending = replace(run, run_id=run_id, not_before=utcnow() + timedelta(seconds=debounce.quiet))
    if created:
        await announce(host, pending)
    elif host.serving:
        host.run_timers.arm(pending)
    return run_id


async def insert_replacing(
    host: Host, call: StoreCall, run: RunRecord, holder: str
) -> RunRecord | None:
    """``on_duplicate="cancel"``: cancel the live run holding ``run``'s dedup id (with
    its children) and insert ``run`` in its place, as :meth:`Store.insert_run
    <engine_core.store.Store.insert_run>` does; again while another start took the id
    first. Of concurrent such starts each cancels the holder it finds, and the store's
    claim lets one insert at a time, so one run is left live."""
    pause = 0.01
    while True:
        if not await stop_holder(host, call, run, holder):
            # Claimed by a start that has not inserted its run yet: wait for it.
            await asyncio.sleep(pause)
            pause = min(2 * pause, 1.0)
        try:
            return await call(lambda: host.store.insert_run(run))
        except DuplicateRunError as exc:
            holder = exc.run_id


async def stop_holder(host: Host, call: StoreCall, run: RunRecord, holder: str) -> bool:
    """Cancel ``holder`` (holding ``run``'s dedup id) unless it has ended; False when it
    does not exist yet. :class:`DuplicateRunError` when it cannot be cancelled."""
    found = await call(lambda: host.store.get_run(holder))
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
    call: StoreCall,
    workflow: str,
    input: Any,
    run_id: str,
) -> str:
    """Record a run of ``workflow`` (registered elsewhere, perhaps nowhere yet) for the
    fleet to drive, without checking that any live worker serves it."""
    run = new_run(workflow, input, run_id=run_id, started_by=host.instance_id, queues=host.queues)
    await call(lambda: host.store.insert_run(run))
    return run_id


def check_input(fn: Callable[..., Any], workflow: str, input: Any) -> None:
    """``input`` must fit the type ``fn`` declares for it: :class:`InvalidInputError`."""
    declared = declared_parameter(fn, 1)
    if declared is None:
        return
    stored = to_stored(input, f"input of workflow {workflow!r}")
    try:
        from_json(stored, declared)
    except (ValueError, TypeError) as exc:
        listed: Any = getattr(exc, "errors", None)  # pydantic's ValidationError lists them
        name = getattr(declared, "__name__", str(declared))
        raise InvalidInputError(
            f"input of workflow {workflow!r} does not fit {name}: {exc}",
            errors=listed() if callable(listed) else None,
        ) from exc
