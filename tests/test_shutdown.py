"""Leaving ``async with engine`` always ends, within ``shutdown_grace``: every background
loop stops when asked, even when a cancellation is lost inside a library (as
``asyncio.wait_for`` can lose one on Python 3.11), and work that will not stop when
cancelled is left behind rather than waited for for ever."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from engine_core import Engine, NotSerializableError
from engine_core.memory import InMemoryStore
from engine_core.store import Store
from tests.conftest import mongo_store

GRACE_S = 1.0
#: How long past ``shutdown_grace`` a stop may take: stopping each loop, the cancelled
#: work's unwinding (1 s), and a busy machine. A hang is what this catches.
SLACK_S = 10.0


async def _swallow_one_cancellation() -> None:
    """Block until cancelled, then return as if nothing happened: what a library that
    lost the cancellation does."""
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        pass


class LosesCancellations(InMemoryStore):
    """An in-memory store whose ``method`` loses every cancellation that reaches it."""

    def __init__(self, method: str) -> None:
        super().__init__()
        original = getattr(self, method)

        async def losing(*args: Any, **kwargs: Any) -> Any:
            await _swallow_one_cancellation()
            return await original(*args, **kwargs)

        setattr(self, method, losing)


def _engine(store: Store) -> Engine:
    engine = Engine(store, lease_ttl="5s", shutdown_grace=GRACE_S, recovery_interval="1s")

    @engine.workflow("noop")
    async def noop(ctx: Any, data: Any) -> Any:
        return data

    @engine.step_function("job")
    async def job(data: Any) -> Any:
        return data

    engine.queue("line", concurrency=1)
    return engine


async def _leave_within_grace(engine: Engine, inside: float) -> float:
    async with asyncio.timeout(GRACE_S + SLACK_S + inside):
        async with engine:
            await asyncio.sleep(inside)
            began = time.monotonic()
    return time.monotonic() - began


@pytest.mark.parametrize(
    "method",
    [
        "list_schedules",  # the scheduler
        "queued_runs",  # a queue's admitter
        "find_delayed_runs",  # the delay and deadline sweep
        "find_scheduled_steps",  # recovery
        "find_claims",  # the worker
    ],
)
async def test_a_loop_whose_cancellation_is_lost_still_stops(method: str) -> None:
    store = LosesCancellations(method)
    # Long enough for the admitter's first look (it waits a second before it).
    await _leave_within_grace(_engine(store), inside=1.3)


async def test_a_step_that_will_not_stop_is_left_behind_at_shutdown() -> None:
    store = InMemoryStore()
    engine = Engine(store, lease_ttl="5s", shutdown_grace=GRACE_S)
    begun, release = asyncio.Event(), asyncio.Event()

    @engine.workflow("stubborn")
    async def stubborn(ctx: Any, data: Any) -> Any:
        async def hold() -> None:
            begun.set()
            while not release.is_set():  # swallows every cancellation
                try:
                    await release.wait()
                except asyncio.CancelledError:
                    continue

        return await ctx.step("hold", hold)

    try:
        async with asyncio.timeout(GRACE_S + SLACK_S):
            async with engine:
                await engine.start("stubborn", None)
                await begun.wait()
    finally:
        release.set()  # the step left behind ends with the test


async def test_200_start_and_stop_cycles_on_a_real_server_all_leave(nx_uri: str) -> None:
    store = await mongo_store(nx_uri)
    try:
        for cycle in range(200):
            engine = Engine(store, lease_ttl="5s", shutdown_grace=GRACE_S)

            @engine.workflow("noop")
            async def noop(ctx: Any, data: Any) -> Any:
                return data

            async with asyncio.timeout(GRACE_S + SLACK_S):
                async with engine:
                    # Even a start that raises (nothing recorded) must not keep it.
                    with pytest.raises(NotSerializableError):
                        await engine.start("noop", object())
                    if cycle % 10 == 0:
                        await engine.start("noop", cycle)
    finally:
        await store.close()
