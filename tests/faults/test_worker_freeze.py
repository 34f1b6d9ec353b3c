"""A worker frozen (SIGSTOP) in the middle of a step, past its lease, then resumed: the
fleet takes the step over as a new attempt, and the frozen worker's late outcome is
fenced out, so the step is recorded once (it does run twice: the frozen attempt could
not be stopped, which is what idempotency keys are for)."""

from __future__ import annotations

import asyncio
import time

import pytest

from engine_core import Engine
from tests.support.fleet import Fleet

pytestmark = pytest.mark.faults

OUTPUT = {"slow-inline": "slow", "slow-job": "job-0"}


async def wait_record(fleet: Fleet, kind: str, attempt: int, limit: float = 30) -> int:
    """The pid that logged ``kind`` for ``attempt`` of the step."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        for row in fleet.records():
            if row["kind"] == kind and row.get("attempt") == attempt:
                return int(row["pid"])
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {kind} of attempt {attempt}\n{fleet.stderr()}")


@pytest.mark.parametrize("workflow", ["slow-inline", "slow-job"])
async def test_a_frozen_workers_late_outcome_is_fenced_out(
    fleet: Fleet, client: Engine, workflow: str
) -> None:
    first = fleet.spawn()
    run_id = await client.start(workflow, {"seconds": 3})
    assert await wait_record(fleet, "start", 1) == first.pid
    fleet.freeze(first)
    try:
        second = fleet.spawn()
        # The first worker's lease (or claim) lapses; the second one takes the step over.
        assert await wait_record(fleet, "start", 2, limit=40) == second.pid
    finally:
        fleet.thaw(first)
    # Resumed, the first worker finishes its attempt at once and tries to record it.
    assert await wait_record(fleet, "end", 1) == first.pid
    assert await client.result(run_id, timeout=60) == OUTPUT[workflow]
    status = await client.status(run_id)
    assert status.steps["slow"].attempts == 2
    history = [(e.attempt, e.status) for e in await client.history(run_id)]
    succeeded = [attempt for attempt, state in history if state == "succeeded"]
    assert succeeded == [2], history  # attempt 1's late success never landed
    runs = [r for r in fleet.records() if r["kind"] == "end"]
    assert sorted((r["attempt"], r["pid"]) for r in runs) == [(1, first.pid), (2, second.pid)]
