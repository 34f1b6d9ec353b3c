"""The registry of serving engines (docs/guides/workers.md): each records itself while it serves, a
client starts any workflow a live worker serves, by name."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import engine_core.fleet.registry as registry
from engine_core import Engine, WorkflowContext, WorkflowNotRegisteredError
from engine_core.common.clock import utcnow
from engine_core.testing.worker_cases import make_worker


def serve_double(engine: Engine) -> None:
    @engine.workflow("double")
    async def double(ctx: WorkflowContext, data: Any) -> int:
        return int(await ctx.step("x2", lambda: data * 2))

    @engine.step_function("send-email")
    async def send(payload: Any) -> None:
        return None

    engine.queue("mail", concurrency=3, rate="10/1m")


async def test_a_serving_engine_is_listed_until_it_stops(
    make_engine: Callable[..., Engine],
) -> None:
    worker, client = make_engine(concurrency=4), make_engine()
    serve_double(worker)
    assert await client.list_workers() == []
    async with worker:
        (listed,) = await client.list_workers()
        assert listed.instance_id == worker.instance_id
        assert (listed.host, listed.pid) == (socket.gethostname(), os.getpid())
        assert listed.workflows == ["double"]
        assert listed.step_functions == ["send-email"]
        assert listed.queues == {
            "mail": {
                "concurrency": 3,
                "worker_concurrency": None,
                "key_concurrency": None,
                "rate": "10/60s",
                "key_rate": None,
                "fairness": None,
            }
        }
        assert listed.versions == []  # workflows have no versions yet
        assert listed.concurrency == 4 and listed.slots_used == 0
        assert listed.started_at <= listed.last_seen <= utcnow()
    assert await client.list_workers() == []


async def test_a_crashed_worker_is_gone_after_missed_refreshes(
    make_engine: Callable[..., Engine],
) -> None:
    client = make_engine()
    soon = utcnow() + timedelta(milliseconds=300)
    await client.store.put_worker(make_worker("crashed", expires_at=soon))
    assert [w.instance_id for w in await client.list_workers()] == ["crashed"]
    await asyncio.sleep(0.4)
    assert await client.list_workers() == []


async def test_the_record_is_refreshed_with_one_write_per_interval(
    make_engine: Callable[..., Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry, "REFRESH_S", 0.1)
    worker = make_engine()
    serve_double(worker)
    writes = 0
    put = worker.store.put_worker

    async def counted(record: Any) -> None:
        nonlocal writes
        writes += 1
        await put(record)

    monkeypatch.setattr(worker.store, "put_worker", counted)
    loop = asyncio.get_running_loop()
    began = loop.time()
    async with worker:
        first = (await worker.list_workers())[0].last_seen
        while writes < 5:  # refreshed again and again (a loaded machine takes longer)
            assert loop.time() - began < 30, writes
            await asyncio.sleep(0.05)
        assert (await worker.list_workers())[0].last_seen > first
    # One at start, then at most one per interval, however slow the machine.
    assert writes <= 2 + (loop.time() - began) / registry.REFRESH_S
    assert registry.REFRESH_S * 4 <= registry.EXPIRES_AFTER_S <= 30


async def test_a_client_starts_a_workflow_only_a_worker_registered(
    make_engine: Callable[..., Engine],
) -> None:
    worker, client = make_engine(), make_engine()
    serve_double(worker)
    with pytest.raises(WorkflowNotRegisteredError, match="the fleet serves: none"):
        await client.start("double", 1)
    async with worker:
        # Visible at once: the client reads the registry again for a name it lacks.
        run_id = await client.start("double", 21)
        assert await client.result(run_id, timeout=10) == 42
        with pytest.raises(WorkflowNotRegisteredError) as raised:
            await client.start("dubble", 1)
        assert "the fleet serves: ['double']" in str(raised.value)
        assert "registered here: none" in str(raised.value)
    assert await client.list_runs() != []


async def test_a_serving_engine_starts_what_another_worker_serves(
    make_engine: Callable[..., Engine],
) -> None:
    worker, api = make_engine(), make_engine()
    serve_double(worker)

    @api.workflow("other")
    async def other(ctx: WorkflowContext, data: Any) -> None:
        return None

    async with worker, api:
        run_id = await api.start("double", 5)
        assert await api.result(run_id, timeout=10) == 10
