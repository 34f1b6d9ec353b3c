"""``engine.replay_check`` (docs/guides/changing-code.md): dry replays of stored runs
against this code, writing nothing, listing the runs that would diverge and why."""

from __future__ import annotations

import asyncio
from typing import Any

import pydantic
import pytest

from engine_core import Engine, ReplayReport, WorkflowContext, WorkflowNotRegisteredError
from engine_core.memory import InMemoryStore
from engine_core.memory.cloning import clone
from engine_core.records import StepRecord, utcnow
from engine_core.run import replay_check as replay_check_module
from engine_core.run.divergence import callable_name
from engine_core.run.keys import CURRENT_SCHEME
from engine_core.store import Store
from engine_core.testing.builders import done_step, make_run


def charge() -> str:
    return "charged"


def ship() -> str:
    return "shipped"


async def _contents(store: Store) -> Any:
    """Everything the store holds, to compare before and after."""
    if isinstance(store, InMemoryStore):
        return clone((store._runs, store._steps, store._events, store._leases, store._queues))
    db = store.database  # type: ignore[attr-defined]
    out = {}
    for name in sorted(await db.list_collection_names()):
        out[name] = sorted([d async for d in db[name].find({})], key=lambda d: repr(d.get("_id")))
    return out


def _order(engine: Engine, code: dict[str, int]) -> None:
    @engine.workflow("order")
    async def order(ctx: WorkflowContext, data: Any) -> list[str]:
        if code["v"] == 1:
            out = [await ctx.step("charge", charge)]
        elif code["v"] == 2:  # moved: ship first
            out = [await ctx.step("ship", ship)]
        else:  # the same move, guarded by a patch
            out = []
            if await ctx.patched("ship-first"):
                out.append(await ctx.step("ship", ship))
            out.append(await ctx.step("charge", charge))
        await ctx.wait_for_event("go")
        return out

    @engine.workflow("other")
    async def other(ctx: WorkflowContext, data: Any) -> str:
        await ctx.wait_for_event("go")
        return "ok"


async def _wait_parked(engine: Engine, run_ids: list[str]) -> None:
    for _ in range(300):
        states = [await engine.status(r) for r in run_ids]
        if all("go" in s.steps for s in states):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(states)


async def test_replay_check_lists_the_runs_that_would_diverge_and_writes_nothing(
    store: Store, engine: Engine
) -> None:
    code = {"v": 1}
    _order(engine, code)
    async with engine:
        old = [await engine.start("order", run_id=f"old-{i}") for i in range(3)]
        await _wait_parked(engine, old)
        finished = await engine.start("other", run_id="ended")
        await engine.send_event(finished, "go", None)
        assert await engine.result(finished, timeout=10) == "ok"
        waiting = await engine.start("other", run_id="other-1")
        await _wait_parked(engine, [waiting])
    # A new build, checked against the store before it ships (no worker running).
    code["v"] = 2
    before = await _contents(store)
    report = await engine.replay_check()
    assert isinstance(report, ReplayReport)
    assert report.checked == 4  # the three orders and the waiting run; not the ended one
    assert sorted(d.run_id for d in report.diverged) == old
    first = report.diverged[0]
    assert first.step == "charge" and "charge" in first.recorded and "'ship'" in first.found
    assert first.reason
    assert (await engine.replay_check(workflow="other")).diverged == []
    assert (await engine.replay_check(include_ended=True)).checked == 5
    only = await engine.replay_check(run_ids=["old-1", "ended", "missing"])
    assert only.checked == 1 and [d.run_id for d in only.diverged] == ["old-1"]
    assert (await engine.replay_check(limit=2)).checked == 2
    # The patched build replays every old run as recorded.
    code["v"] = 3
    patched = await engine.replay_check(workflow="order")
    assert patched.checked == 3 and patched.diverged == []
    assert await _contents(store) == before


async def test_replay_check_of_an_unknown_workflow_raises(engine: Engine) -> None:
    with pytest.raises(WorkflowNotRegisteredError):
        await engine.replay_check(workflow="nope")


async def _store_parked(store: Store, run_id: str, step: str, fn: Any) -> None:
    """A run of ``order`` as a pass leaves it: ``step`` finished, waiting on ``go``."""
    recorded = done_step(run_id, step, result=f"{step}ped")
    recorded.order, recorded.ran = 0, callable_name(fn)
    journal = {step: recorded}
    run = make_run(run_id, "order", journal=journal, key_scheme=CURRENT_SCHEME, passes=1)
    await store.insert_run(run)
    wait = StepRecord(
        run_id=run_id, key="go", kind="event", status="scheduled", event="go",
        scheduled_at=utcnow(), updated_at=utcnow(), order=1, ran="go",
    )  # fmt: skip
    await store.save_steps([wait])


async def test_replay_check_reads_and_replays_a_few_runs_at_a_time_reporting_in_order(
    store: Store, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs listed four at a time (oldest first), their steps read two at a time and
    replayed three at once (the check's page, batch and window, made small): every run
    is checked once, and the divergent ones (each waiting a moment for branches that
    never come) are reported in the order the runs are listed (as they were created),
    whichever finishes first."""
    monkeypatch.setattr(replay_check_module, "_PAGE", 4)
    monkeypatch.setattr(replay_check_module, "_BATCH", 2)
    monkeypatch.setattr(replay_check_module, "_WINDOW", 3)
    _order(engine, {"v": 1})
    moved = [f"r-{i}" for i in (1, 2, 4, 7, 8)]
    for i in range(9):
        run_id = f"r-{i}"
        if run_id in moved:
            await _store_parked(store, run_id, "ship", ship)
        else:
            await _store_parked(store, run_id, "charge", charge)
    before = await _contents(store)
    report = await engine.replay_check(workflow="order")
    assert report.checked == 9
    assert [d.run_id for d in report.diverged] == moved
    assert all(d.step == "ship" and "new step 'charge'" in d.found for d in report.diverged)
    assert await _contents(store) == before


class ChargeV1(pydantic.BaseModel):
    charge_id: str


class ChargeV2(pydantic.BaseModel):
    charge_id: str
    currency: str  # a required field added by a later deploy


def charge_v1() -> ChargeV1:
    return ChargeV1(charge_id="ch-1")


def charge_v2() -> ChargeV2:
    return ChargeV2(charge_id="ch-1", currency="EUR")


charge_v2.__qualname__ = charge_v1.__qualname__  # the same step function, changed


async def test_a_stored_value_that_no_longer_fits_its_model_is_listed_not_raised(
    make_engine: Any,
) -> None:
    """A required field added to a step's result model: the run whose recorded result
    lacks it is listed as diverging at that step (the reason says why), and the check
    goes on with the other runs instead of raising."""
    old, new = make_engine(), make_engine()
    for engine, fn in ((old, charge_v1), (new, charge_v2)):

        @engine.workflow("order")
        async def order(ctx: WorkflowContext, data: Any, fn: Any = fn) -> str:
            charged = await ctx.step("charge", fn)
            await ctx.wait_for_event("go")
            return str(charged.charge_id)

    async with old:
        stale = await old.start("order", run_id="stale")
        await _wait_parked(old, [stale])
    fresh = await new.start("order", run_id="fresh")
    await new.drive(fresh)
    report = await new.replay_check(workflow="order")
    assert report.checked == 2
    [found] = report.diverged
    assert (found.run_id, found.step) == ("stale", "charge")
    assert found.reason == "value no longer fits the declared type"
    assert "ChargeV2" in found.found and "currency" in found.found
    assert "charge_id" in found.recorded
