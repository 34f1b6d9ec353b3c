"""Retention (docs/guides/data-at-rest.md): an ended run and all it owns are deleted
``retention`` after it ended, by the recovery pass here (neither the memory store nor
the test servers run a TTL monitor), never a run that has not ended; on both stores."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from engine_core import (
    Engine,
    InvalidDurationError,
    RunNotFoundError,
    WorkflowContext,
    WorkflowRunFailedError,
)
from engine_core.store import Store


def register(engine: Engine, **options: Any) -> None:
    @engine.workflow("brief", **options)
    async def brief(ctx: WorkflowContext, data: Any) -> str:
        await ctx.step("work", lambda: "done")
        await ctx.write_stream("log", "a line")
        return "ok"


async def gone(engine: Engine, run_id: str) -> bool:
    try:
        await engine.status(run_id)
    except RunNotFoundError:
        return True
    return False


async def test_an_ended_run_goes_with_all_it_owns_after_its_retention(store: Store) -> None:
    engine = Engine(store, retention="1h", lease_ttl="5s")
    register(engine, retention="300ms")
    async with engine:
        run_id = await engine.start("brief")
        assert await engine.result(run_id, timeout=30) == "ok"
        status = await engine.status(run_id)
        assert status.status == "completed" and status.steps["work"].status == "succeeded"
        report = await engine.recover()
        assert report.expired == 0 and not await gone(engine, run_id)  # not yet
        await asyncio.sleep(0.4)
        report = await engine.recover()
        assert report.expired == 1 and "1 ended runs expired" in report.summary()
        assert await gone(engine, run_id)
    assert await store.load_steps(run_id) == []
    assert await store.stream_length(run_id, "log") == 0


async def test_the_engine_retention_is_the_default_and_none_keeps_runs(store: Store) -> None:
    engine = Engine(store, retention="200ms", lease_ttl="5s")
    register(engine)

    @engine.workflow("long", retention="1h")
    async def long(ctx: WorkflowContext, data: Any) -> str:
        return "kept"

    async with engine:
        short = await engine.start("brief")
        other = await engine.start("long")
        await engine.result(short, timeout=30)
        await engine.result(other, timeout=30)
        await asyncio.sleep(0.3)
        await engine.recover()
        assert await gone(engine, short)  # the engine's retention
        assert not await gone(engine, other)  # its workflow's own
    plain = Engine(store, lease_ttl="5s")

    @plain.workflow("forever")
    async def forever(ctx: WorkflowContext, data: Any) -> str:
        return "kept"

    async with plain:
        kept_id = await plain.start("forever")
        await plain.result(kept_id, timeout=30)
        await asyncio.sleep(0.3)
        await plain.recover()
        assert not await gone(plain, kept_id)  # no retention: kept until pruned


async def test_a_run_that_has_not_ended_is_never_deleted(store: Store) -> None:
    engine = Engine(store, retention="100ms", lease_ttl="5s")

    @engine.workflow("waiting")
    async def waiting(ctx: WorkflowContext, data: Any) -> Any:
        await ctx.step("first", lambda: 1)
        return await ctx.wait_for_event("go", timeout="1h")

    async with engine:
        run_id = await engine.start("waiting")
        await asyncio.sleep(0.4)
        await engine.recover()
        assert (await engine.status(run_id)).status == "running"
        await engine.cancel(run_id)  # a cancel ends it: its retention starts
        await asyncio.sleep(0.2)
        await engine.recover()
        assert await gone(engine, run_id)


async def test_a_retried_run_is_kept_while_it_lives(store: Store) -> None:
    engine = Engine(store, retention="300ms", lease_ttl="5s")
    fail = {"now": True}

    def flaky() -> str:
        if fail["now"]:
            raise RuntimeError("down")
        return "up"

    @engine.workflow("flaky")
    async def flaky_wf(ctx: WorkflowContext, data: Any) -> str:
        await ctx.step("before", lambda: "x")
        await ctx.step("call", flaky)
        return await ctx.wait_for_event("finish", timeout="1h")

    async with engine:
        run_id = await engine.start("flaky")
        with pytest.raises(WorkflowRunFailedError):
            await engine.result(run_id, timeout=30)
        fail["now"] = False
        await engine.retry(run_id)
        for _ in range(200):
            if (await engine.status(run_id)).steps["call"].status == "succeeded":
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.4)  # past the retention its failure started
        await engine.recover()
        status = await engine.status(run_id)
        assert status.status == "running" and status.steps["before"].result == "x"
        await engine.send_event(run_id, "finish", "done")
        assert await engine.result(run_id, timeout=30) == "done"


async def test_the_process_that_ends_a_run_applies_its_workflow_retention(
    store: Store,
) -> None:
    worker = Engine(store, lease_ttl="5s")
    register(worker, retention="200ms")
    client = Engine(store, retention="1h")  # registers nothing: starts by name
    async with worker:
        run_id = await client.start("brief")
        assert await client.result(run_id, timeout=30) == "ok"
        await asyncio.sleep(0.3)
        await worker.recover()
        assert await gone(client, run_id)


@pytest.mark.parametrize("bad", ["soon", 0, -1, "0s", True, [1]])
def test_a_retention_that_is_not_a_duration_raises_at_construction(bad: Any) -> None:
    from engine_core.memory import InMemoryStore

    with pytest.raises(InvalidDurationError) as raised:
        Engine(InMemoryStore(), retention=bad)
    assert isinstance(raised.value, ValueError)
    engine = Engine(InMemoryStore())
    with pytest.raises(InvalidDurationError):
        engine.workflow("w", retention=bad)
