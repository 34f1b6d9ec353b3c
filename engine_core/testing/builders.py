"""Records the conformance cases build."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from engine_core.common.clock import utcnow
from engine_core.records import AttemptEntry, RunRecord, StepRecord
from engine_core.store import Store


def make_run(run_id: str = "run-1", workflow: str = "wf", **extra: Any) -> RunRecord:
    """A running run ``run_id`` of ``workflow``, created now (``extra``: other fields)."""
    now = utcnow()
    fields: dict[str, Any] = {
        "status": "running",
        "input": {"n": 1},
        "created_at": now,
        "updated_at": now,
    }
    fields.update(extra)
    return RunRecord(run_id=run_id, workflow=workflow, **fields)


def make_job(
    run_id: str, key: str, *, due_in: float = -1.0, function: str = "fn", **extra: Any
) -> StepRecord:
    """A dispatched step ``key`` of ``run_id`` on the queue, due ``due_in`` seconds from now."""
    now = utcnow()
    return StepRecord(
        run_id=run_id,
        key=key,
        kind="dispatch",
        status="scheduled",
        function=function,
        payload={"k": key},
        max_attempts=3,
        due_at=now + timedelta(seconds=due_in),
        scheduled_at=now,
        updated_at=now,
        **extra,
    )


async def begin(store: Store, run_id: str = "run-1") -> int:
    """Begin a pass under a lease that lapses at once (so any later begin takes over);
    returns its token."""
    run = await store.begin_pass(run_id, holder="tester", ttl=0)
    assert run is not None
    return run.token


def done_step(run_id: str, key: str, attempts: int = 1, result: Any = None) -> StepRecord:
    """A succeeded inline step, as a pass journals it."""
    now = utcnow()
    return StepRecord(
        run_id=run_id,
        key=key,
        kind="inline",
        status="succeeded",
        attempts=attempts,
        result=result,
        updated_at=now,
        ended_at=now,
        history=[AttemptEntry(attempt=attempts, status="succeeded", at=now, started_at=now)],
    )


async def claim_one(store: Store, function: str, holder: str, ttl: float) -> StepRecord | None:
    """Claim one job, the one due first, or None."""
    jobs = await store.claim_steps([function], holder=holder, claim_ttl=ttl, limit=1)
    return jobs[0] if jobs else None
