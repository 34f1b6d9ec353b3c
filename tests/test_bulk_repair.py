"""Bulk repair (issue 21) on both stores: ``fork_many``, ``cancel_many`` and
``retry_many`` over a filter, with ``dry_run``; each run is acted on once, and the
report is bounded."""

from __future__ import annotations

from typing import Any

import pytest

from engine_core import Engine, WorkflowContext, WorkflowRunFailedError


class PaymentDown(Exception):
    pass


def register(engine: Engine, broken: dict[str, bool]) -> None:
    def pay(n: int) -> int:
        if broken["pay"]:
            raise PaymentDown("provider down") if n % 2 else ValueError("bad card")
        return n

    @engine.workflow("pay")
    async def pay_flow(ctx: WorkflowContext, n: int) -> int:
        return await ctx.step("pay", pay, n)

    @engine.workflow("wait")
    async def wait(ctx: WorkflowContext, n: int) -> Any:
        return await ctx.wait_for_event("go")


async def _failed_runs(engine: Engine, count: int) -> list[str]:
    ids = [await engine.start("pay", n) for n in range(count)]
    for run_id in ids:
        with pytest.raises(WorkflowRunFailedError):
            await engine.result(run_id, timeout=10)
    return ids


async def test_fork_many_forks_the_runs_a_failure_type_failed(engine: Engine) -> None:
    broken = {"pay": True}
    register(engine, broken)
    async with engine:
        ids = await _failed_runs(engine, 6)
        payment = {r for r in ids if (await engine.status(r)).input % 2}
        dry = await engine.fork_many(status="failed", error_type="PaymentDown", dry_run=True)
        assert (dry.matched, dry.done, dry.dry_run) == (3, 0, True)
        assert {r for r, _ in dry.sample} == payment
        assert [await engine.list_forks(r) for r in ids] == [[]] * 6
        broken["pay"] = False
        report = await engine.fork_many(workflow="pay", status="failed", error_type="PaymentDown")
        assert (report.matched, report.done, report.skipped) == (3, 3, 0)
        assert {r for r, _ in report.sample} == payment
        for original, fork in report.sample:
            assert fork is not None
            assert await engine.result(fork, timeout=10) == (await engine.status(original)).input
            assert await engine.list_forks(original) == [fork]
        with pytest.raises(ValueError, match="pass a filter"):
            await engine.fork_many()


async def test_fork_many_never_forks_its_own_forks(engine: Engine) -> None:
    register(engine, {"pay": False})
    async with engine:
        ids = [await engine.start("wait", n) for n in range(4)]
        report = await engine.fork_many(workflow="wait")
        assert (report.matched, report.done) == (4, 4)
        assert len(await engine.list_runs(workflow="wait", limit=100)) == 8
        cancelled = await engine.cancel_many(workflow="wait")
        assert (cancelled.matched, cancelled.done) == (8, 8)
        assert {r.status for r in await engine.list_runs(workflow="wait", limit=100)} == {
            "cancelled"
        }
        assert (await engine.cancel_many(workflow="wait")).matched == 0
        assert [(await engine.status(r)).forks for r in ids] == [1] * 4


async def test_retry_many_retries_failed_runs(engine: Engine) -> None:
    broken = {"pay": True}
    register(engine, broken)
    async with engine:
        ids = await _failed_runs(engine, 4)
        assert (await engine.retry_many(workflow="pay", dry_run=True)).matched == 4
        # ``status`` as documented: "failed" is the one status a retry takes.
        assert (await engine.retry_many(status="failed", dry_run=True)).matched == 4
        with pytest.raises(ValueError, match="cannot be retried"):
            await engine.retry_many(status="running")
        broken["pay"] = False
        report = await engine.retry_many(workflow="pay", error_type="ValueError")
        assert (report.matched, report.done) == (2, 2)
        for run_id in ids:
            n = (await engine.status(run_id)).input
            if n % 2 == 0:
                assert await engine.result(run_id, timeout=10) == n
            else:
                assert (await engine.status(run_id)).status == "failed"
        with pytest.raises(ValueError, match="cannot be cancelled"):
            await engine.cancel_many(status="failed")
