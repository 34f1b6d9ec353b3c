"""A retried run re-enters its queue, its dedup id and its deadline as a start would
(issue 19, case 1), on both stores: ``engine.retry`` of a failed run on a full queue
waits ``queued`` for admission, takes its dedup id back (or refuses, changing nothing,
while another live run holds it) and gets a fresh deadline window from the retry."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from engine_core import (
    DuplicateRunError,
    Engine,
    WorkflowContext,
    WorkflowDeadlineExceededError,
    WorkflowRunFailedError,
)


def register_flaky(engine: Engine, broken: dict[str, bool]) -> None:
    """``flaky`` fails its step while ``broken["on"]``, then waits for event "go"."""

    def check() -> str:
        if broken["on"]:
            raise ConnectionError("service down")
        return "ok"

    @engine.workflow("flaky")
    async def flaky(ctx: WorkflowContext, data: Any) -> Any:
        await ctx.step("check", check)
        return await ctx.wait_for_event("go")

    @engine.workflow("wait")
    async def wait(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("go")


async def _failed(engine: Engine, run_id: str) -> None:
    with pytest.raises(WorkflowRunFailedError, match="service down"):
        await engine.result(run_id, timeout=10)


async def test_a_retried_run_waits_for_its_queue_like_a_start(engine: Engine) -> None:
    broken = {"on": True}
    register_flaky(engine, broken)
    engine.queue("one", concurrency=1)
    async with engine:
        first = await engine.start("flaky", queue="one")
        await _failed(engine, first)
        second = await engine.start("wait", queue="one")
        for _ in range(100):
            if (await engine.status(second)).status == "running":
                break
            await asyncio.sleep(0.02)
        broken["on"] = False
        await engine.retry(first)
        await asyncio.sleep(0.3)  # admitters had every chance to let it past the limit
        assert (await engine.status(first)).status == "queued"
        assert (await engine.status(second)).status == "running"
        await engine.send_event(second, "go", 2)
        assert await engine.result(second, timeout=10) == 2
        for _ in range(200):
            if (await engine.status(first)).status == "running":
                break
            await asyncio.sleep(0.02)
        await engine.send_event(first, "go", 1)
        assert await engine.result(first, timeout=10) == 1


async def test_a_retried_run_takes_its_dedup_id_back(engine: Engine) -> None:
    broken = {"on": True}
    register_flaky(engine, broken)
    engine.queue("digests")
    async with engine:
        first = await engine.start("flaky", queue="digests", dedup_id="d7")
        await _failed(engine, first)
        broken["on"] = False
        await engine.retry(first)
        with pytest.raises(DuplicateRunError) as raised:
            await engine.start("wait", queue="digests", dedup_id="d7", run_id="second")
        assert raised.value.run_id == first
        assert await engine.list_runs(prefix="second") == []
        await engine.send_event(first, "go", 1)
        assert await engine.result(first, timeout=10) == 1


async def test_a_retry_whose_dedup_id_was_taken_fails_and_changes_nothing(
    engine: Engine,
) -> None:
    broken = {"on": True}
    register_flaky(engine, broken)
    engine.queue("digests")
    async with engine:
        first = await engine.start("flaky", queue="digests", dedup_id="d7")
        await _failed(engine, first)
        before = await engine.status(first)
        other = await engine.start("wait", queue="digests", dedup_id="d7")
        broken["on"] = False
        with pytest.raises(DuplicateRunError, match="d7") as raised:
            await engine.retry(first)
        assert raised.value.run_id == other
        after = await engine.status(first)
        assert after.status == "failed"
        assert after.steps["check"].status == before.steps["check"].status == "failed"
        assert after.steps["check"].attempts == before.steps["check"].attempts
        # Once the holder ends, the retry goes through and holds the id again.
        await engine.cancel(other)
        await engine.retry(first)
        with pytest.raises(DuplicateRunError):
            await engine.start("wait", queue="digests", dedup_id="d7")
        await engine.send_event(first, "go", 1)
        assert await engine.result(first, timeout=10) == 1


async def test_a_retried_run_gets_a_fresh_deadline_window_from_the_retry(
    engine: Engine,
) -> None:
    broken = {"on": True}
    register_flaky(engine, broken)
    async with engine:
        run_id = await engine.start("flaky", deadline="700ms")
        await _failed(engine, run_id)
        await asyncio.sleep(0.9)  # past the deadline it was started with
        broken["on"] = False
        retried_at = time.monotonic()
        await engine.retry(run_id)
        await asyncio.sleep(0.2)
        assert (await engine.status(run_id)).status == "running"  # not cancelled at once
        with pytest.raises(WorkflowDeadlineExceededError):
            await engine.result(run_id, timeout=10)
        took = time.monotonic() - retried_at
    assert 0.65 <= took < 5  # a whole window from the retry, then cancelled


async def test_a_retried_queued_run_keeps_its_deadline_while_it_waits(engine: Engine) -> None:
    broken = {"on": True}
    register_flaky(engine, broken)
    engine.queue("one", concurrency=1)
    async with engine:
        # Long enough for the run to fail first on a loaded machine.
        run_id = await engine.start("flaky", queue="one", deadline="3s")
        await _failed(engine, run_id)
        blocker = await engine.start("wait", queue="one")
        await asyncio.sleep(3.2)  # past the deadline it was started with
        broken["on"] = False
        await engine.retry(run_id)
        assert (await engine.status(run_id)).status == "queued"
        with pytest.raises(WorkflowDeadlineExceededError):
            await engine.result(run_id, timeout=10)
        await engine.cancel(blocker)
