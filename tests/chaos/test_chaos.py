"""Nothing is lost when processes die: real workers, killed with SIGKILL, on MongoDB."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from datetime import timedelta

import pytest

from engine_core import Engine, WorkflowRunFailedError
from engine_core.records import RunRecord, utcnow
from tests.support.fleet import Fleet
from tests.support.waiting import wait_step

pytestmark = pytest.mark.chaos


async def test_a_crash_inside_an_inline_step_is_finished_elsewhere(
    fleet: Fleet, client: Engine
) -> None:
    first = fleet.spawn()
    run_id = await client.start("crashy", {"slow": 1.0})
    await wait_step(client, run_id, "b", "running")
    # "running" is durable before the step's body begins: kill it once the body has
    # begun (a kill in between is a lost attempt too, but one whose body never ran).
    deadline = time.monotonic() + 30
    while not fleet.records("step-start") and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    fleet.kill(first)
    fleet.spawn()
    assert await client.result(run_id, timeout=60) == ["a", "b", "c"]
    done = Counter(r["tag"] for r in fleet.records("step"))
    assert done == {"a": 1, "b": 1, "c": 1}
    status = await client.status(run_id)
    assert status.steps["a"].attempts == 1
    assert status.steps["b"].attempts == 2  # the crashed attempt counts
    assert [r["attempt"] for r in fleet.records("step-start")] == [1, 2]


@pytest.mark.parametrize("pause", [0.0, 0.5])
async def test_a_crash_before_an_outcome_is_durable_reruns_the_step_as_a_counted_attempt(
    fleet: Fleet, client: Engine, pause: float
) -> None:
    # One write per step: a step's outcome rides on the next durable write. The process
    # dies after the step returned and before that write.
    first = fleet.spawn()
    run_id = await client.start("dies-after-return", {"pause": pause})
    first.wait(timeout=30)  # it kills itself
    fleet.spawn()
    assert await client.result(run_id, timeout=60) == ["returned", "b"]
    assert [r["attempt"] for r in fleet.records("step-start")] == [1, 2]
    status = await client.status(run_id)
    assert status.steps["a"].attempts == 2
    history = [(e.step, e.attempt, e.status) for e in await client.history(run_id)]
    assert ("a", 1, "failed") in history and ("a", 2, "succeeded") in history
    lost = [e for e in await client.history(run_id) if e.step == "a" and e.status == "failed"]
    assert lost[0].error is not None and lost[0].error["type"] == "WorkerLost"


async def test_sleeps_wake_at_their_original_time_after_a_crash(
    fleet: Fleet, client: Engine
) -> None:
    first = fleet.spawn()
    runs = [await client.start("sleepy", {"seconds": 3}) for _ in range(3)]
    for run_id in runs:
        await wait_step(client, run_id, "nap", "scheduled")
    fleet.kill(first)
    await asyncio.sleep(1.0)
    fleet.spawn()
    # On a loaded machine the new worker may be ready only after the wake time: it can
    # wake nothing before it runs.
    ready_at = time.time()
    for run_id in runs:
        woke_at = await client.result(run_id, timeout=60)
        nap = await client.store.get_step(run_id, "nap")
        assert nap is not None and nap.due_at is not None
        due = nap.due_at.timestamp()
        # Woken at the original wake time (within polling slack), not 3 s after restart.
        assert due - 0.05 <= woke_at <= max(due, ready_at) + 1.5


async def test_a_dispatch_whose_process_died_before_pickup_runs_once(
    fleet: Fleet, client: Engine
) -> None:
    orchestrator = fleet.spawn("--no-functions")  # records the job, cannot run it
    run_id = await client.start("dispatchy", {"jobs": 1})
    await wait_step(client, run_id, "job-0", "scheduled")
    fleet.kill(orchestrator)
    fleet.spawn()
    assert await client.result(run_id, timeout=60) == [{"done": 0}]
    assert len(fleet.records("job")) == 1


async def test_a_fleet_runs_every_dispatched_step_exactly_once(
    fleet: Fleet, client: Engine
) -> None:
    # No process dies here, so no claim may lapse: a lease long enough for a loaded
    # 2-core machine (a claim lapses only when its worker stalls for 2/3 of it).
    for _ in range(3):
        fleet.spawn("--lease-ttl", "10s")
    runs = [await client.start("dispatchy", {"jobs": 4}) for _ in range(50)]
    for run_id in runs:
        await client.result(run_id, timeout=120)
    jobs = fleet.records("job")
    per_attempt = Counter((r["run"], r["step"], r["attempt"]) for r in jobs)
    assert set(per_attempt.values()) == {1}, "one claimed attempt ran twice"
    per_step = Counter((r["run"], r["step"]) for r in jobs)
    assert len(per_step) == 200 and set(per_step.values()) == {1}, per_attempt


async def test_a_fleet_under_chaos_completes_every_run(fleet: Fleet, client: Engine) -> None:
    workers = [fleet.spawn() for _ in range(3)]
    runs = [
        await client.start("dispatchy", {"jobs": 4, "seconds": 0.2, "retries": 5})
        for _ in range(50)
    ]
    rng = random.Random(7)
    deadline = time.monotonic() + 240
    pending = set(runs)
    while pending and time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        victim = rng.randrange(len(workers))
        fleet.kill(workers[victim])
        workers[victim] = fleet.spawn()
        for run_id in list(pending):
            if (await client.status(run_id)).status != "running":
                pending.discard(run_id)
    for run_id in runs:
        await client.result(run_id, timeout=120)
    starts = Counter((r["run"], r["step"]) for r in fleet.records("job-start"))
    finished = Counter((r["run"], r["step"]) for r in fleet.records("job"))
    assert len(finished) == 200
    for run_id in runs:
        for step, status in (await client.status(run_id)).steps.items():
            assert status.status == "succeeded"
            # Never more executions than attempts, and never past the allowed 6.
            assert starts[(run_id, step)] <= status.attempts <= 6


async def test_three_instances_recovering_at_once_resume_each_run_once(
    fleet: Fleet, client: Engine
) -> None:
    old = utcnow() - timedelta(minutes=10)
    runs = [f"stalled-{i}" for i in range(20)]
    for run_id in runs:
        await client.store.insert_run(
            RunRecord(
                run_id=run_id,
                workflow="pass-counter",
                status="running",
                input=None,
                created_at=old,
                updated_at=old,
                pending_pass=False,
            )
        )
    procs = [fleet.spawn("--stalled-after", "1m", wait=False) for _ in range(3)]
    for proc in procs:
        fleet.wait_ready(proc)
    for run_id in runs:
        assert await client.result(run_id, timeout=60) == "only"
    passes = Counter(r["run"] for r in fleet.records("pass"))
    assert passes == {run_id: 1 for run_id in runs}


async def test_a_step_that_kills_its_process_every_time_fails_the_run(
    fleet: Fleet, client: Engine
) -> None:
    run_id = await client.start("suicidal")
    deaths = 0
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        proc = fleet.spawn()
        while proc.poll() is None and time.monotonic() < deadline:
            if (await client.status(run_id)).status != "running":
                break
            await asyncio.sleep(0.1)
        if proc.poll() is None:
            break
        deaths += 1
    with pytest.raises(WorkflowRunFailedError, match="'fatal' failed after 3 attempt"):
        await client.result(run_id, timeout=5)
    assert deaths == 3
    error = (await client.status(run_id)).error
    assert error is not None and (error["step"], error["attempts"]) == ("fatal", 3)
