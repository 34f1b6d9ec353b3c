"""The lines a run writes at INFO and WARNING (docs/guides/observability.md): one per
start, end, retry, outage start and end, with the run's attributes on the record; none
per step."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

import engine_core.common.outages
from engine_core import Engine, StoreUnavailableError, TraceIdFilter, WorkflowContext
from engine_core.common.outages import Outages


def _engine_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith(("engine_core", "pikku_mongo"))]


async def test_a_run_logs_its_start_and_end_and_nothing_per_step(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    @engine.workflow("quiet")
    async def quiet(ctx: WorkflowContext, data: Any) -> int:
        for i in range(5):
            await ctx.step(f"s{i}", lambda n=i: n)
        return 5

    caplog.set_level(logging.INFO)
    async with engine:
        run_id = await engine.start("quiet")
        assert await engine.result(run_id, timeout=10) == 5
    mine = [r for r in _engine_lines(caplog) if getattr(r, "run_id", None) == run_id]
    assert [r.getMessage() for r in mine] == [
        f"run {run_id} of workflow 'quiet' started",
        f"run {run_id} of workflow 'quiet' ended: completed",
    ]
    run = await engine.store.get_run(run_id)
    assert run is not None
    for record in mine:
        assert record.levelno == logging.INFO
        assert record.workflow == "quiet"  # type: ignore[attr-defined]
        assert record.trace_id == run.wire["traceparent"].split("-")[1]  # type: ignore[attr-defined]
        assert record.step in (None, "-")  # type: ignore[attr-defined]
    # Nothing else about this run at INFO or above (no line per step).
    assert not [r for r in _engine_lines(caplog) if run_id in r.getMessage() and r not in mine]


async def test_a_retried_attempt_warns_and_a_failed_run_says_why(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> None:
        raise ValueError("card declined\nsecond line of detail")

    @engine.workflow("fails")
    async def fails(ctx: WorkflowContext, data: Any) -> None:
        await ctx.step("charge", broken, retries=1, retry_delay=0)

    caplog.set_level(logging.INFO)
    async with engine:
        run_id = await engine.start("fails")
        with pytest.raises(Exception, match="card declined"):
            await engine.result(run_id, timeout=10)
    mine = [r for r in _engine_lines(caplog) if getattr(r, "run_id", None) == run_id]
    assert [(r.levelname, r.getMessage()) for r in mine] == [
        ("INFO", f"run {run_id} of workflow 'fails' started"),
        (
            "WARNING",
            f"run {run_id}: step 'charge' attempt 1 of 2 failed (ValueError: card declined "
            "second line of detail); retrying in 0.00 s",
        ),
        (
            "INFO",
            f"run {run_id} of workflow 'fails' ended: failed (step 'charge' failed after 2 "
            "attempt(s): ValueError: card declined second line of detail)",
        ),
    ]
    assert mine[1].step == "charge"  # type: ignore[attr-defined]
    assert mine[2].step == "charge"  # type: ignore[attr-defined]
    assert all("\n" not in r.getMessage() for r in mine)


async def test_a_dispatched_retry_warns_with_its_step(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    calls = 0

    @engine.step_function("flaky-fn")
    async def flaky(payload: Any) -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("try again")
        return "ok"

    @engine.workflow("dispatches")
    async def dispatches(ctx: WorkflowContext, data: Any) -> str:
        return str(await ctx.dispatch("d", "flaky-fn", {}, retries=1, retry_delay=0))

    caplog.set_level(logging.INFO)
    async with engine:
        run_id = await engine.start("dispatches")
        assert await engine.result(run_id, timeout=10) == "ok"
    warned = [
        r
        for r in _engine_lines(caplog)
        if r.levelno == logging.WARNING and getattr(r, "run_id", None) == run_id
    ]
    assert len(warned) == 1
    assert warned[0].step == "d"  # type: ignore[attr-defined]
    assert "RuntimeError: try again" in warned[0].getMessage()


async def test_the_filter_keeps_a_lifecycle_lines_own_attributes(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    @engine.workflow("filtered")
    async def filtered(ctx: WorkflowContext, data: Any) -> None:
        return None

    caplog.handler.addFilter(TraceIdFilter())
    caplog.set_level(logging.INFO)
    run_id = await engine.start("filtered")
    line = next(r for r in caplog.records if getattr(r, "run_id", None) == run_id)
    assert line.workflow == "filtered"  # type: ignore[attr-defined]
    assert line.step == "-"  # type: ignore[attr-defined]
    assert line.trace_id != "-"  # type: ignore[attr-defined]


async def test_an_outage_is_one_short_line_when_it_starts_and_one_when_it_ends(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine_core.common.outages, "FIRST_WAIT_S", 0.001)
    monkeypatch.setattr(engine_core.common.outages, "LAST_WAIT_S", 0.002)
    outages = Outages()
    calls = 0
    dump = "connection refused\n" + "Topology Description: <" + "x" * 600 + ">"

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls <= 20:
            raise StoreUnavailableError(dump)
        return "back"

    caplog.set_level(logging.DEBUG)
    assert await outages.call(flaky) == "back"
    lines = _engine_lines(caplog)
    assert [r.levelname for r in lines] == ["WARNING", "INFO"]
    assert all(len(r.getMessage()) < 400 and "\n" not in r.getMessage() for r in lines)
    assert "connection refused" in lines[0].getMessage()
    assert "20 calls failed" in lines[1].getMessage()


async def test_a_lease_renewal_met_by_an_outage_is_no_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from engine_core.run.leases import KeepAlive

    calls = 0

    async def renew() -> bool:
        nonlocal calls
        calls += 1
        if calls < 4:
            raise StoreUnavailableError("connection refused")
        return False

    caplog.set_level(logging.INFO)
    extra = {"run_id": "r-1", "workflow": "w", "step": None, "trace_id": None}
    async with KeepAlive(renew, 0.03, "the lease of run 'r-1'", extra) as alive:
        while not alive.lost:
            await asyncio.sleep(0.01)
    warned = [r for r in _engine_lines(caplog) if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in warned] == [
        "lost the lease of run 'r-1'; its holder's writes will be fenced out"
    ]
    assert warned[0].run_id == "r-1"  # type: ignore[attr-defined]
