"""Flow control and time through the public API, on both stores: queues with
concurrency, keys, priority, rate limits and dedup; delayed starts; deadlines."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from engine_core import (
    DuplicateRunError,
    Engine,
    InvalidDurationError,
    InvalidLimitError,
    QueueNotDeclaredError,
    WorkflowContext,
    WorkflowDeadlineExceededError,
    WorkflowRunCancelledError,
)
from engine_core.store import Store
from tests.conftest import open_store
from tests.support.waiting import wait_step


@pytest.fixture(params=["memory", "mongo", "mongo-targeted"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """These tests also run with targeted polling forced on (the job and line indexes a
    sharded cluster gets)."""
    made = await open_store(request)
    yield made
    await made.close()


class Gauge:
    """Counts the runs inside a workflow body at once, overall and per key."""

    def __init__(self, fill: int | None = None) -> None:
        self.now = 0
        self.peak = 0
        self.per_key: dict[Any, int] = {}
        self.key_peak: dict[Any, int] = {}
        self.order: list[Any] = []
        # ``fill``: the first runs in hold until that many are in at once (for up to
        # 10 s), so that a loaded machine, slow to start the admitted runs, still lets
        # them overlap; then each holds ``seconds`` more, as every run does.
        self._fill = fill
        self._filled = asyncio.Event()

    async def hold(self, key: Any, seconds: float) -> None:
        self.now += 1
        self.peak = max(self.peak, self.now)
        self.per_key[key] = self.per_key.get(key, 0) + 1
        self.key_peak[key] = max(self.key_peak.get(key, 0), self.per_key[key])
        try:
            if self._fill is not None:
                if self.now >= self._fill:
                    self._filled.set()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._filled.wait(), 10)
            await asyncio.sleep(seconds)
        finally:
            self.now -= 1
            self.per_key[key] -= 1


def register_held(engine: Engine, gauge: Gauge, seconds: float = 0.05) -> None:
    @engine.workflow("held")
    async def held(ctx: WorkflowContext, data: Any) -> Any:
        gauge.order.append(data["n"])
        await ctx.step("hold", gauge.hold, data.get("key"), seconds)
        return data["n"]


async def test_a_queue_bounds_the_runs_admitted_at_once(engine: Engine) -> None:
    gauge = Gauge(fill=3)
    register_held(engine, gauge)
    engine.queue("q", concurrency=3)
    async with engine:
        ids = [await engine.start("held", {"n": n}, queue="q") for n in range(12)]
        assert (await engine.status(ids[-1])).status in ("queued", "running")
        results = await asyncio.gather(*(engine.result(r, timeout=30) for r in ids))
    assert results == list(range(12))
    assert gauge.peak == 3


async def test_a_run_holds_its_slot_while_it_sleeps(engine: Engine) -> None:
    @engine.workflow("napper")
    async def napper(ctx: WorkflowContext, data: Any) -> Any:
        await ctx.sleep("nap", "1s")
        return data

    engine.queue("one", concurrency=1)
    async with engine:
        first = await engine.start("napper", 1, queue="one")
        second = await engine.start("napper", 2, queue="one")
        await wait_step(engine, first, "nap", "scheduled")
        assert (await engine.status(first)).status == "running"
        assert (await engine.status(second)).status == "queued"
        assert await engine.result(second, timeout=10) == 2


async def test_key_concurrency_counts_per_key(engine: Engine) -> None:
    gauge = Gauge(fill=3)
    register_held(engine, gauge, seconds=0.08)
    engine.queue("tenants", key_concurrency=1)
    async with engine:
        ids = []
        for n in range(9):
            key = f"t{n % 3}"
            ids.append(await engine.start("held", {"n": n, "key": key}, queue="tenants", key=key))
        await asyncio.gather(*(engine.result(r, timeout=30) for r in ids))
    assert gauge.key_peak == {"t0": 1, "t1": 1, "t2": 1}
    assert gauge.peak == 3  # other keys go past a key that waits


async def test_priority_then_start_time_orders_admission(engine: Engine) -> None:
    gauge = Gauge()
    register_held(engine, gauge, seconds=0.01)
    engine.queue("ordered", concurrency=1)
    # Queued by a client first, so that the whole line is there before admission.
    client = Engine(engine.store)
    client.workflow("held")(lambda ctx, data: None)
    client.queue("ordered", concurrency=1)
    ids = []
    for n, priority in enumerate([5, 0, 5, -1, 0]):
        ids.append(await client.start("held", {"n": n}, queue="ordered", priority=priority))
    async with engine:
        await asyncio.gather(*(engine.result(r, timeout=30) for r in ids))
    assert gauge.order == [3, 1, 4, 0, 2]


async def test_a_rate_limit_spaces_admissions(engine: Engine) -> None:
    gauge = Gauge()
    register_held(engine, gauge, seconds=0)
    engine.queue("slow", rate="2/500ms")
    async with engine:
        began = time.monotonic()
        ids = [await engine.start("held", {"n": n}, queue="slow") for n in range(5)]
        await asyncio.gather(*(engine.result(r, timeout=30) for r in ids))
        took = time.monotonic() - began
    # 2 at once, 2 more a window later, the fifth a window after that.
    assert took >= 0.95


async def test_dedup_refuses_a_second_run_while_the_first_has_not_ended(engine: Engine) -> None:
    @engine.workflow("wait")
    async def wait(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("go")

    engine.queue("digests")
    async with engine:
        first = await engine.start("wait", queue="digests", dedup_id="digest-7")
        with pytest.raises(DuplicateRunError) as raised:
            await engine.start("wait", queue="digests", dedup_id="digest-7", run_id="other")
        assert raised.value.run_id == first
        assert (await engine.list_runs(prefix="other")) == []  # nothing recorded
        # The same run id again is an idempotent start, not a duplicate.
        assert await engine.start("wait", queue="digests", dedup_id="digest-7", run_id=first)
        # Another queue, or no queue, is another namespace.
        await engine.start("wait", dedup_id="digest-7")
        await engine.send_event(first, "go", 1)
        assert await engine.result(first, timeout=10) == 1
        again = await engine.start("wait", queue="digests", dedup_id="digest-7")
        assert again != first
        await engine.cancel(again)
        third = await engine.start("wait", queue="digests", dedup_id="digest-7")
        assert third not in (first, again)


async def test_concurrent_starts_with_one_dedup_id_make_one_run(engine: Engine) -> None:
    @engine.workflow("wait")
    async def wait(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("go")

    async def attempt() -> str | None:
        try:
            return await engine.start("wait", dedup_id="once")
        except DuplicateRunError as exc:
            return "dup:" + exc.run_id

    got = await asyncio.gather(*(attempt() for _ in range(10)))
    winners = [g for g in got if g is not None and not g.startswith("dup:")]
    assert len(winners) == 1
    assert all(g == winners[0] or g == "dup:" + winners[0] for g in got)


async def test_a_delayed_run_is_queued_until_due(engine: Engine) -> None:
    @engine.workflow("now")
    async def now(ctx: WorkflowContext, data: Any) -> Any:
        return time.monotonic()

    async with engine:
        began = time.monotonic()
        run_id = await engine.start("now", delay="400ms")
        assert (await engine.status(run_id)).status == "queued"
        ran_at = await engine.result(run_id, timeout=10)
    assert ran_at - began >= 0.38


async def test_a_delay_on_a_queue_joins_the_line_when_due(engine: Engine) -> None:
    gauge = Gauge()
    register_held(engine, gauge, seconds=0)
    engine.queue("later", concurrency=1)
    async with engine:
        late = await engine.start("held", {"n": "late"}, queue="later", delay="300ms")
        early = await engine.start("held", {"n": "early"}, queue="later")
        await asyncio.gather(engine.result(late, timeout=10), engine.result(early, timeout=10))
    assert gauge.order == ["early", "late"]


async def test_a_delayed_run_started_by_a_client_is_released_by_a_worker(
    make_engine: Callable[..., Engine],
) -> None:
    client = make_engine()
    worker = make_engine(recovery_interval="200ms")
    for e in (client, worker):
        e.workflow("hi")(_say_hi)
    run_id = await client.start("hi", delay="300ms")
    async with worker:
        assert await worker.result(run_id, timeout=10) == "hi"


async def _say_hi(ctx: WorkflowContext, data: Any) -> str:
    return "hi"


async def test_a_deadline_cancels_the_run_and_its_children(engine: Engine) -> None:
    @engine.workflow("kid")
    async def kid(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("never")

    @engine.workflow("parent")
    async def parent(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.child("kid", "kid")

    async with engine:
        run_id = await engine.start("parent", deadline="400ms")
        with pytest.raises(WorkflowDeadlineExceededError, match="deadline") as raised:
            await engine.result(run_id, timeout=10)
        assert isinstance(raised.value, WorkflowRunCancelledError)
        status = await engine.status(run_id)
        assert status.status == "cancelled"
        assert status.error is not None
        assert status.error["type"] == "WorkflowDeadlineExceededError"
        children = await engine.list_children(run_id)
        assert [c.status for c in children] == ["cancelled"]


async def test_a_deadline_runs_while_the_run_is_queued(engine: Engine) -> None:
    @engine.workflow("never")
    async def never(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("go")

    engine.queue("full", concurrency=1)
    async with engine:
        await engine.start("never", queue="full")
        waiting = await engine.start("never", queue="full", deadline="300ms")
        with pytest.raises(WorkflowDeadlineExceededError):
            await engine.result(waiting, timeout=10)


async def test_a_deadline_set_by_a_client_is_swept_by_a_worker(
    make_engine: Callable[..., Engine],
) -> None:
    client = make_engine()
    worker = make_engine(recovery_interval="200ms")
    for e in (client, worker):
        e.workflow("stuck")(_stuck)
    run_id = await client.start("stuck", deadline="300ms")
    async with worker:
        with pytest.raises(WorkflowDeadlineExceededError):
            await worker.result(run_id, timeout=10)


async def _stuck(ctx: WorkflowContext, data: Any) -> Any:
    return await ctx.wait_for_event("never")


async def test_a_queued_run_can_be_cancelled_and_frees_nothing_it_did_not_hold(
    engine: Engine,
) -> None:
    @engine.workflow("never")
    async def never(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("go")

    engine.queue("one", concurrency=1)
    async with engine:
        first = await engine.start("never", queue="one")
        second = await engine.start("never", queue="one")
        third = await engine.start("never", queue="one")
        await asyncio.sleep(0.1)
        await engine.cancel(second, compensate=True)
        assert (await engine.status(second)).status == "cancelled"
        assert (await engine.status(third)).status == "queued"
        await engine.cancel(first)
        for _ in range(200):
            if (await engine.status(third)).status == "running":
                break
            await asyncio.sleep(0.02)
        assert (await engine.status(third)).status == "running"
        [queue] = await engine.list_queues()
        assert (queue.name, queue.queued, queue.active) == ("one", 0, 1)
        assert queue.admitted_this_minute + queue.admitted_last_minute >= 2
        assert [r.run_id for r in await engine.list_runs(status="running")] == [third]


async def test_worker_concurrency_bounds_this_process(engine: Engine) -> None:
    gauge = Gauge(fill=2)
    register_held(engine, gauge, seconds=0.05)
    engine.queue("local", worker_concurrency=2)
    async with engine:
        ids = [await engine.start("held", {"n": n}, queue="local") for n in range(8)]
        await asyncio.gather(*(engine.result(r, timeout=30) for r in ids))
    assert gauge.peak == 2


async def test_bad_flow_arguments_get_specific_errors(engine: Engine) -> None:
    engine.workflow("w")(_say_hi)
    with pytest.raises(InvalidLimitError, match="rate"):
        engine.queue("a", rate="fast")
    with pytest.raises(InvalidLimitError, match="rate"):
        engine.queue("a", rate="0/1s")
    with pytest.raises(InvalidLimitError, match="concurrency"):
        engine.queue("a", concurrency=-1)
    with pytest.raises(InvalidLimitError, match="key_concurrency"):
        engine.queue("a", key_concurrency=0)
    with pytest.raises(QueueNotDeclaredError, match=r"engine\.queue"):
        await engine.start("w", queue="nope")
    assert isinstance(QueueNotDeclaredError("x"), ValueError)
    with pytest.raises(InvalidDurationError, match="delay"):
        await engine.start("w", delay="soon")
    with pytest.raises(InvalidDurationError, match="deadline"):
        await engine.start("w", deadline=-1)
    engine.queue("a", concurrency=2, rate="10/1m")
    engine.queue("a", concurrency=2, rate="10/1m")  # the same again is fine
    with pytest.raises(ValueError, match="other limits"):
        engine.queue("a", concurrency=3)
    with pytest.raises(InvalidLimitError, match="priority"):
        await engine.start("w", queue="a", priority="high")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="queue="):
        await engine.start("w", key="tenant")
    assert await engine.list_runs() == []


async def test_a_client_starts_on_a_queue_the_fleet_declared_without_declaring_it(
    make_engine: Any,
) -> None:
    """The tier declares nothing: a queue a live worker declares, or whose limits the
    store keeps, takes its starts (key and priority included) under the fleet's
    limits; a queue declared nowhere still raises."""
    worker, tier = make_engine(), make_engine()
    gauge = Gauge()
    register_held(worker, gauge, seconds=0.05)
    worker.queue("orders", concurrency=1)
    async with worker:
        ids = [
            await tier.start("held", {"n": n}, queue="orders", key="tenant-1", priority=n)
            for n in range(4)
        ]
        await asyncio.gather(*(tier.result(r, timeout=30) for r in ids))
        assert gauge.peak == 1  # the fleet's limit holds
        with pytest.raises(QueueNotDeclaredError, match="nor by any process"):
            await tier.start("held", {"n": 9}, queue="nope")
    # No live worker now; the limits stay stored: a client with the code (and no
    # declaration) records the start, queued for the fleet.
    coder = make_engine()
    register_held(coder, Gauge(), seconds=0.05)
    later = await coder.start("held", {"n": 5}, queue="orders")
    assert (await coder.status(later)).status == "queued"
