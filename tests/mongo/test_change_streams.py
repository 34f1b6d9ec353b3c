"""Idle workers are woken by a change stream where the server serves one (nx-27017),
and fall back to polling where it does not (mongoeco)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

import engine_core.fleet.worker
from engine_core import Engine, WorkflowContext
from pikku_mongo import MongoStore
from tests.conftest import with_database


async def _hint_count(store: MongoStore, insert: Any) -> int:
    hints = store.job_hints()
    assert hints is not None
    seen = 0

    async def follow() -> None:
        nonlocal seen
        async for _ in hints:
            seen += 1

    task = asyncio.ensure_future(follow())
    await asyncio.sleep(0.5)  # the stream is open
    await insert()
    await asyncio.sleep(0.5)
    task.cancel()
    return seen


async def test_a_job_insert_is_a_hint_on_nx(nx_uri: str) -> None:
    store = MongoStore.from_uri(with_database(nx_uri, f"cs_{uuid.uuid4().hex[:10]}"))
    await store.init()
    from engine_core.testing.builders import make_job

    async def insert() -> None:
        await store.insert_step(make_job("r", "k"))

    assert await _hint_count(store, insert) >= 1
    await store.close()


async def test_without_change_streams_the_hints_just_end(mongoeco_uri: str) -> None:
    store = MongoStore.from_uri(with_database(mongoeco_uri, f"cs_{uuid.uuid4().hex[:10]}"))
    await store.init()
    hints = store.job_hints()
    assert hints is not None
    assert [h async for h in hints] == []  # refused: the worker polls instead
    await store.close()


async def test_an_idle_worker_elsewhere_is_woken_by_the_stream(
    nx_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An idle worker that, left to its backoff, would not look again for a minute.
    monkeypatch.setattr(engine_core.fleet.worker, "IDLE_MIN_S", 60.0)
    monkeypatch.setattr(engine_core.fleet.worker, "IDLE_MAX_S", 60.0)
    uri = with_database(nx_uri, f"cs_{uuid.uuid4().hex[:10]}")
    orchestrator = Engine(MongoStore.from_uri(uri))
    worker = Engine(MongoStore.from_uri(uri))
    started: list[float] = []

    @orchestrator.workflow("one-job")
    async def one_job(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.dispatch("job", "work", data)

    @worker.step_function("work")
    async def work(payload: Any) -> Any:
        started.append(asyncio.get_running_loop().time())
        return payload

    async with worker:
        await asyncio.sleep(1)  # idle: polled once, now waiting
        async with orchestrator:
            await orchestrator.start("one-job", 7)
            for _ in range(50):  # the job starts as soon as its insert is seen
                if started:
                    break
                await asyncio.sleep(0.1)
    assert len(started) == 1
