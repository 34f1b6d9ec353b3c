"""Steps that wait outside the pass: dispatched steps, sleeps, events, updates and child
runs.

Each is armed once (a step record in ``scheduled``), and the pass parks; what it waits
for (a worker, a timer, an event or an update, the child's end) settles the step and
triggers a new pass, which finds the step finished.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from engine_core.common.durations import Duration, check_retry_delay, parse_duration
from engine_core.common.runtime import JobSlot
from engine_core.common.values import check_name, check_retries, to_stored, value_limit
from engine_core.errors import WorkflowNotRegisteredError
from engine_core.mirror import mirror_step
from engine_core.records import StepKind, StepRecord, UpdateRecord
from engine_core.run.fork import KEYS_OF
from engine_core.run.keys import child_run_id
from engine_core.run.pass_state import PassState
from engine_core.run.signals import Parked, stored_failure
from engine_core.run.transitions import claimed as claim
from engine_core.run.transitions import job_unclaimed, woken, write

#: What a wait takes (an event, an update).
_Taken = TypeVar("_Taken")


def _scheduled(
    p: PassState, key: str, kind: StepKind, due_at: datetime | None, **fields: Any
) -> StepRecord:
    """A step record armed now, waiting for ``due_at`` (or for something outside)."""
    now = p.clock.now()
    return StepRecord(
        run_id=p.run_id,
        key=key,
        kind=kind,
        status="scheduled",
        due_at=due_at,
        scheduled_at=now,
        updated_at=now,
        traceparent=p.traceparent,
        **p.checks.identity(key),
        **fields,
    )


async def _arm(p: PassState, step: StepRecord) -> None:
    """Record a waiting step (once: a concurrent arm of the same step is a no-op)."""
    await p.start(step.key, 0)
    if await p.store.insert_step(step):
        await mirror_step(p.runtime.mirror, step)
    p.steps[step.key] = step


def _wake(p: PassState, step: StepRecord, result: Any) -> Any:
    """Settle a scheduled step (a sleep that is due, an event, a timeout) with ``result``."""
    p.record(step.key, woken(step.kind, step.event, result, now=p.clock.now()))
    return result


async def dispatch_step(
    p: PassState,
    name: str,
    function: str,
    payload: Any,
    *,
    retries: int,
    retry_delay: Duration,
    timeout: Duration | None,
) -> Any:
    """``ctx.dispatch``: the recorded result, or put the step on the queue and park."""
    key = p.key(name)
    check_name(function, "step function name")
    if (check := p.checks.reach(key, "dispatch", function)) is not None:
        await check
    attempts = check_retries(retries) + 1
    delay = check_retry_delay(retry_delay)
    limit = parse_duration(timeout, what="timeout") if timeout is not None else None
    done = p.finished(key)
    if done is not None:
        return done.result
    if key not in p.steps:
        job = _scheduled(
            p,
            key,
            "dispatch",
            p.clock.now(),
            max_attempts=attempts,
            retry_delay=delay,
            timeout=limit,
            function=function,
            payload=to_stored(payload, f"payload of step {key!r}", value_limit(p.store)),
            idempotency_of=p.run.wire.get(KEYS_OF),
        )
        slot = p.runtime.job_slot(function)
        if slot is not None:
            ran = await p.track(_run_here(p, job, slot))
            if ran is not None and ran.status in ("succeeded", "failed"):
                p.adopt(ran, handed=True)
                if ran.status == "failed":
                    raise stored_failure(ran)
                return ran.result
        else:
            await p.track(_arm(p, job))
            p.runtime.work_arrived()
    elif p.steps[key].halted:
        # A suspend that raced a resume can leave the job halted on a running run.
        await p.track(p.start(key, 0))
        await p.control.unhalt(p.run_id)
    await p.park()


async def _run_here(p: PassState, job: StepRecord, slot: JobSlot) -> StepRecord | None:
    """Put the job on the queue already claimed by this process and run it here while
    the pass waits (no park, no replay). Inserted first and started second: a stop
    that lands in between fences the start, and the job goes back on the queue unrun.
    Returns the job as recorded, or None when the pass must park instead."""
    p.names.refuse_late()  # before the insert: a branch that outlived the body arms nothing
    holder = p.runtime.instance_id
    claimed = claim(job, holder, p.runtime.config.lease_ttl, now=p.clock.now()).apply(job)
    slot.hold(claimed)
    try:
        inserted = await p.store.insert_step(claimed)
    except BaseException:
        slot.release()
        raise
    if not inserted:  # armed already, by a pass that died: the queue has it
        slot.release()
        return None
    try:
        await p.start(job.key, 0)
    except BaseException:
        slot.release()
        # Back unhalted: the pass may have failed to start for a lost lease or an
        # outage, not a stop, and the run's next owner may already be parked on the
        # job. A worker that claims it reads the run first and halts it if stopped.
        await write(p.store, p.run_id, job.key, job_unclaimed(claimed, holder))
        raise
    p.steps[job.key] = claimed
    await mirror_step(p.runtime.mirror, claimed)
    return await slot.run(claimed)


async def sleep_step(p: PassState, name: str, duration: Duration) -> None:
    """``ctx.sleep``: arm a durable wake-up, or wake once it is due."""
    key = p.key(name)
    if (check := p.checks.reach(key, "sleep", None)) is not None:
        await check
    seconds = parse_duration(duration, what="sleep duration")
    if p.finished(key) is not None:
        return None
    step = p.steps.get(key)
    now = p.clock.now()
    if step is None:
        due = now + timedelta(seconds=seconds)
        await p.track(_arm(p, _scheduled(p, key, "sleep", due, timeout=seconds)))
        p.arm_timer(due)
        await p.park()
    if step.due_at is not None and step.due_at <= now:
        _wake(p, step, None)
        return None
    if step.due_at is not None:
        p.arm_timer(step.due_at)
    await p.park()


async def event_step(p: PassState, name: str, timeout: Duration | None) -> Any:
    """``ctx.wait_for_event``: the oldest unconsumed event, or wait for one."""
    key, limit, done = await _reach_wait(p, "event", name, timeout)
    if done is not None:
        return done.result
    return await p.track(_wait_event(p, key, name, limit))


async def _reach_wait(
    p: PassState, kind: StepKind, name: str, timeout: Duration | None
) -> tuple[str, float | None, StepRecord | None]:
    """A wait for an event or an update reached: its key, its time limit (seconds), and
    its record if it has finished."""
    check_name(name, f"{kind} name")
    key = p.key(name)
    if (check := p.checks.reach(key, kind, name)) is not None:
        await check
    limit = parse_duration(timeout, what=f"{kind} timeout") if timeout is not None else None
    return key, limit, p.finished(key)


async def _wait_event(p: PassState, key: str, name: str, limit: float | None) -> Any:
    event = p.store.consume_event
    return await _wait_for(p, key, "event", name, limit, event, lambda e: e.payload)


async def _wait_for(
    p: PassState,
    key: str,
    kind: StepKind,
    name: str,
    limit: float | None,
    consume: Callable[[str, str, str], Awaitable[_Taken | None]],
    result_of: Callable[[_Taken], Any],
) -> Any:
    """Take what the wait ``key`` waits for (its own if it took one before), or arm the
    wait and park; None once its ``limit`` has passed."""
    step = p.steps.get(key) or _scheduled(p, key, kind, None, event=name)
    taken = await consume(p.run_id, name, f"{p.run_id}\x00{key}")
    if taken is not None:
        return _wake(p, step, result_of(taken))
    now = p.clock.now()
    if key not in p.steps:
        step.due_at = now + timedelta(seconds=limit) if limit is not None else None
        step.timeout = limit
        await _arm(p, step)
    elif step.due_at is not None and step.due_at <= now:
        return _wake(p, step, None)
    if step.due_at is not None:
        p.arm_timer(step.due_at)
    raise Parked()


async def update_step(
    p: PassState, name: str, timeout: Duration | None
) -> tuple[str, dict[str, Any] | None]:
    """``ctx.wait_for_update``: the wait's key, and the update it took as recorded
    (``{"update_id", "payload"}``; None on timeout), or wait for one."""
    key, limit, done = await _reach_wait(p, "update", name, timeout)
    if done is not None:
        return key, done.result
    consume = p.store.consume_update
    return key, await p.track(_wait_for(p, key, "update", name, limit, consume, _update_taken))


def _update_taken(update: UpdateRecord) -> dict[str, Any]:
    return {"update_id": update.update_id, "payload": update.payload}


async def child_step(p: PassState, name: str, workflow: str, input: Any) -> Any:
    """``ctx.child``: the child run's recorded output, or start the child and park."""
    key = p.key(name)
    check_name(workflow, "workflow name")
    if p.runtime.workflow_fn(workflow) is None:
        raise WorkflowNotRegisteredError(
            f"child step {key!r} names workflow {workflow!r}, which is not registered "
            f"on this engine (registered: {sorted(p.runtime.workflow_names())})"
        )
    if (check := p.checks.reach(key, "child", workflow)) is not None:
        await check
    done = p.finished(key)
    if done is not None:
        return done.result
    return await p.track(_await_child(p, key, workflow, input))


async def _await_child(p: PassState, key: str, workflow: str, input: Any) -> Any:
    step = p.steps.get(key)
    child_id = child_run_id(p.run_id, key, p.run.key_scheme)
    if step is None:
        stored_input = to_stored(input, f"input of child step {key!r}", value_limit(p.store))
        # Due at once, so the scheduled sweep checks on the child (see recovery).
        armed = _scheduled(
            p,
            key,
            "child",
            p.clock.now(),
            child_run_id=child_id,
            payload=stored_input,
            function=workflow,
        )
        await _arm(p, armed)
        await p.control.start_child(p.run, key, child_id, workflow, stored_input)
        raise Parked()
    # The child may have ended while nobody settled this step (its process died
    # between the two writes), or never have been created: look once per replay.
    settled = await p.control.reconcile_child(p.run, step)
    if settled is not None:
        p.adopt(settled)
        if settled.status == "failed":
            raise stored_failure(settled)
        return settled.result
    raise Parked()
