"""Interleavings of a store outage with one pass, made deterministic: the engine runs in
this process against a real wire server, and the one write the outage takes away is
chosen by the test.

An attempt number must never run twice, and no outage may fail a run."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from engine_core import Engine
from engine_core.errors import StoreUnavailableError
from engine_core.records import RunRecord, StepRecord
from pikku_mongo import MongoStore
from tests.conftest import with_database
from tests.faults.conftest import LEASE_TTL, MAX_CLOCK_SKEW, RECOVERY_INTERVAL
from tests.faults.workload import assert_no_step_ran_after_its_success, mixed_output, register
from tests.support.execution_log import read_log
from tests.support.proxy import FaultProxy

pytestmark = pytest.mark.faults


@pytest.fixture
async def engines(nx_uri: str, exec_log: Path) -> AsyncIterator[Callable[[], Awaitable[Engine]]]:
    """Serving engines in this process (they run the workload's steps and jobs), each
    with a store of its own on one database, as processes of one fleet would be."""
    uri = with_database(nx_uri, f"o_{uuid.uuid4().hex[:10]}")
    stores: list[MongoStore] = []

    async def make() -> Engine:
        store = MongoStore.from_uri(uri, max_clock_skew=MAX_CLOCK_SKEW)
        stores.append(store)
        await store.init()
        engine = Engine(store, lease_ttl=LEASE_TTL)
        register(engine)
        return engine

    try:
        yield make
    finally:
        for store in stores:
            await store.close()


async def parked_on(engine: Engine, run_id: str, key: str, limit: float = 20) -> None:
    """Once the run's pass has parked on step ``key`` (settled, lease let go)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        run = await engine.store.get_run(run_id)
        if run is not None and not run.open_pass:
            steps = {s.key: s for s in await engine.store.load_steps(run_id)}
            if key in steps and steps[key].status == "scheduled":
                return
        await asyncio.sleep(0.02)
    raise AssertionError(f"run {run_id} did not park on {key!r}")


async def test_an_outcome_whose_own_write_met_the_outage_is_not_lost(
    engines: Callable[[], Awaitable[Engine]], exec_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Step ``a`` succeeds; the body then awaits the store (the dispatched job is
    inserted claimed, to run here), so ``a``'s outcome goes in a write of its own. That
    write meets the outage and gives up (``StoreUnavailableError``: its retries ran out)
    while the job's insert, sent a moment later, rides the outage out. The pass goes
    on; ``a``'s outcome must still land with its next write. It used to be dropped, and
    the pass's settle (parked on the nap) cleared ``a``'s in-flight mark: the next pass,
    in another process, found no trace of ``a`` and ran attempt 1 again (seen in the
    30 s outage: "attempts that ran twice: [('mixed-091', 'a', 1), ...]")."""
    first = await engines()
    store = first.store
    record_steps = store.record_steps
    failed: list[str] = []

    async def outage_once(run_id: str, *, outcomes: list[StepRecord], **kw: Any) -> bool:
        if not failed and [s.key for s in outcomes] == ["a"]:
            failed.append(run_id)
            raise StoreUnavailableError("the MongoDB server is unavailable (test)")
        return await record_steps(run_id, outcomes=outcomes, **kw)

    monkeypatch.setattr(store, "record_steps", outage_once)
    async with first:
        run_id = await first.start("mixed", {"n": 7, "nap": 2.0}, run_id="mixed-007")
        await parked_on(first, run_id, "nap")
    assert failed == [run_id]
    # The nap is over in another process of the fleet: it gives the run its next pass.
    second = await engines()
    async with second:
        assert await second.result(run_id, timeout=30) == mixed_output(7)
    log = read_log(str(exec_log))
    starts = Counter((r["step"], r["attempt"]) for r in log if r["kind"] == "start")
    assert starts[("a", 1)] == 1, sorted(starts.items())
    await assert_no_step_ran_after_its_success(second, [run_id], log)
    # Nothing was lost: the outcome rode on the next write, so no attempt was taken back.
    assert starts == {("a", 1): 1, ("job", 1): 1, ("c", 1): 1}, sorted(starts.items())


def starts_step_a(command: dict[str, Any], run_id: str) -> bool:
    """start_step of ``a``: one update of the run that puts an entry in flight and
    carries no outcome (the run's first write after its lease was taken)."""
    updates = command.get("updates", [])
    if command.get("update") != "pikku_runs" or len(updates) != 1:
        return False
    update: dict[str, Any] = updates[0]
    fields = list(update["u"].get("$set", {}))
    return (
        update["q"].get("_id") == run_id
        and any(f.startswith("inflight.") for f in fields)
        and not any(f.startswith("journal.") for f in fields)
    )


async def test_a_start_whose_reply_was_lost_does_not_run_once_the_run_was_taken_over(
    proxy: FaultProxy, nx_uri: str, exec_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Engine A (behind the proxy) starts step ``a``: the write lands, and its reply is
    held (the proxy freezes) past A's lease, then lost. Engine B takes the run over (its
    recovery finds the step in flight under a lapsed lease), counts attempt 1 lost and
    is about to start attempt 2. A, sending its start again, finds that its first try
    landed: but the run is B's now, so A must not run attempt 1 (it used to: A's body
    and B's ran side by side, attempt 1 after B had counted it lost). No timing is
    left to chance: the proxy thaws once B has begun its pass, and B starts attempt 2
    once A has let the run go."""
    run_id = "taken-1"
    database = f"t_{uuid.uuid4().hex[:10]}"

    def freezing(command: dict[str, Any]) -> bool:
        if not starts_step_a(command, run_id):
            return False
        proxy.freeze()  # until B has taken the run over
        return True

    rule = proxy.drop_reply("update", freezing)

    async def engine(uri: str) -> Engine:
        store = MongoStore.from_uri(uri, max_clock_skew=MAX_CLOCK_SKEW)
        await store.init()
        made = Engine(store, lease_ttl=LEASE_TTL, recovery_interval=RECOVERY_INTERVAL)
        register(made)
        return made

    a = await engine(proxy.uri(database))
    b = await engine(with_database(nx_uri, database))
    b_begin_pass, b_start_step = b.store.begin_pass, b.store.start_step

    async def then_thaw(run: str, **kw: Any) -> RunRecord | None:
        begun = await b_begin_pass(run, **kw)
        if begun is not None and run == run_id:
            proxy.thaw()
        return begun

    # B's start of ``a`` waits until A has done what it does with its lost reply.
    async def after_a(run: str, **kw: Any) -> bool:
        if run == run_id and kw.get("key") == "a":
            deadline = time.monotonic() + 20
            while a._host.driver.driving(run_id) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
        return await b_start_step(run, **kw)

    monkeypatch.setattr(b.store, "begin_pass", then_thaw)
    monkeypatch.setattr(b.store, "start_step", after_a)
    try:
        async with a, b:
            await a.start("mixed", {"n": 3}, run_id=run_id)
            await rule.wait(timeout=20)
            assert await b.result(run_id, timeout=60) == mixed_output(3)
        log = read_log(str(exec_log))
        await assert_no_step_ran_after_its_success(b, [run_id], log)
    finally:
        await a.store.close()
        await b.store.close()
    starts = Counter((r["step"], r["attempt"]) for r in log if r["kind"] == "start")
    assert ("a", 1) not in starts, sorted(starts.items())
    assert starts[("a", 2)] == 1, sorted(starts.items())
