"""What ``engine.start`` records: a run, checked, with its flow-control fields, inserted
holding this process's lease when it may begin here at once."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from engine_core.common.durations import Duration, parse_duration
from engine_core.common.values import check_name, check_run_id
from engine_core.errors import WorkflowNotRegisteredError
from engine_core.flow.queues import QueueLimits, check_priority, declared
from engine_core.records import RunRecord
from engine_core.run.keys import CURRENT_SCHEME
from engine_core.tracing import new_run_traceparent


def check_registered(workflows: Mapping[str, Any], workflow: str) -> None:
    """A typo in a workflow name fails at once, in client mode too."""
    if workflow not in workflows:
        raise WorkflowNotRegisteredError(
            f"no workflow named {workflow!r} is registered on this engine "
            f"(registered: {sorted(workflows) or 'none'})"
        )


def new_run(
    workflow: str,
    input: Any,
    *,
    run_id: str | None,
    started_by: str,
    queues: Mapping[str, QueueLimits],
    now: datetime,
    queue: str | None = None,
    key: str | None = None,
    priority: int = 0,
    dedup_id: str | None = None,
    delay: Duration | None = None,
    deadline: Duration | None = None,
) -> RunRecord:
    """The run to insert at ``now``, every argument checked (``input``: as stored, see
    ``common.values.to_stored``): ``running``, or ``queued`` when it waits for its queue
    or its delay."""
    run_id = check_run_id(run_id) if run_id is not None else uuid.uuid4().hex
    limits = declared(queues, queue) if queue is not None else None
    if limits is None and (key is not None or priority != 0):
        raise ValueError("key and priority order a queue's runs: pass queue= as well")
    if key is not None:
        check_name(key, "queue key")
    check_priority(priority)
    if dedup_id is not None:
        check_name(dedup_id, "dedup_id")
    run = RunRecord(
        run_id=run_id,
        workflow=workflow,
        status="running",
        input=input,
        created_at=now,
        updated_at=now,
        wire={"traceparent": new_run_traceparent(), "started_by": started_by},
        key_scheme=CURRENT_SCHEME,
        queue=queue,
        queue_key=key,
        priority=priority,
        dedup_id=dedup_id,
        fair=limits is not None and limits.fair,
    )
    if delay is not None:
        wait = parse_duration(delay, what="delay")
        run.not_before = now + timedelta(seconds=wait) if wait > 0 else None
    if deadline is not None:
        run.deadline_s = parse_duration(deadline, what="deadline")
        run.deadline_at = now + timedelta(seconds=run.deadline_s)
    if queue is not None or run.not_before is not None:
        run.status = "queued"
        run.pending_pass = False
    return run


def hold_first_pass(run: RunRecord, holder: str, ttl: float) -> None:
    """Make ``run`` be inserted holding ``holder``'s lease: its first pass starts at
    once, with no write to begin it."""
    run.token = run.passes = 1
    run.pending_pass = False
    run.open_pass = True
    run.lease_holder = holder
    run.lease_expires_at = run.created_at + timedelta(seconds=ttl)
