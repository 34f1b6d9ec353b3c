"""The engine's metrics (docs/guides/observability.md), read with the OpenTelemetry SDK's
in-memory reader."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader

import engine_core.metrics
from engine_core import Engine, WorkflowContext


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    made = InMemoryMetricReader()
    engine_core.metrics.use_meter_provider(MeterProvider(metric_readers=[made]))
    yield made
    engine_core.metrics.use_meter_provider(None)


def _points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    found: dict[str, list[Any]] = {}
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


def _total(points: list[Any], **attributes: str) -> float:
    return sum(
        p.value if not isinstance(p, HistogramDataPoint) else p.count
        for p in points
        if all(p.attributes.get(k) == v for k, v in attributes.items())
    )


async def test_a_run_is_counted_timed_and_never_named(
    engine: Engine, reader: InMemoryMetricReader
) -> None:
    calls = 0

    def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("once")
        return "ok"

    @engine.step_function("double")
    async def double(payload: Any) -> int:
        return int(payload) * 2

    @engine.workflow("measured")
    async def measured(ctx: WorkflowContext, data: Any) -> Any:
        await ctx.step("flaky", flaky, retries=1, retry_delay=0)
        return await ctx.dispatch("d", "double", 21)

    async with engine:
        run_id = await engine.start("measured")
        assert await engine.result(run_id, timeout=10) == 42
    points = _points(reader)
    assert _total(points["pikku.run.started"], workflow="measured") == 1
    assert _total(points["pikku.run.ended"], workflow="measured", status="completed") == 1
    assert _total(points["pikku.run.duration"], workflow="measured") == 1
    assert _total(points["pikku.run.queued_duration"], workflow="measured") == 1
    # One data point per attempt: two inline (one failed), one dispatched.
    attempts = points["pikku.step.attempts"]
    assert _total(attempts, kind="inline", outcome="failed") == 1
    assert _total(attempts, kind="inline", outcome="succeeded") == 1
    assert _total(attempts, kind="dispatched", outcome="succeeded") == 1
    assert _total(points["pikku.step.duration"]) == 3
    assert _total(points["pikku.step.schedule_to_start"], kind="dispatched") == 1
    assert _total(points["pikku.worker.slots.used"]) == 0  # all given back
    # No data point of any instrument carries the run id.
    for name, found in points.items():
        for point in found:
            assert run_id not in {str(v) for v in point.attributes.values()}, name
            assert "run_id" not in point.attributes, name


async def test_durations_are_seconds_in_explicit_buckets(
    engine: Engine, reader: InMemoryMetricReader
) -> None:
    @engine.workflow("short")
    async def short(ctx: WorkflowContext, data: Any) -> None:
        await ctx.step("s", lambda: None)

    async with engine:
        await engine.result(await engine.start("short"), timeout=10)
    data = reader.get_metrics_data()
    assert data is not None
    metrics = {m.name: m for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics}
    step = metrics["pikku.step.duration"]
    assert step.unit == "s"
    point = step.data.data_points[0]
    assert tuple(point.explicit_bounds) == engine_core.metrics.STEP_BUCKETS
    assert point.sum < 5
    run = metrics["pikku.run.duration"]
    assert tuple(run.data.data_points[0].explicit_bounds) == engine_core.metrics.RUN_BUCKETS


async def test_queue_depth_is_measured_by_the_recovering_process(
    make_engine: Any, reader: InMemoryMetricReader
) -> None:
    # One run admitted, held on an event; the others wait in line.
    worker = make_engine(recovery_interval="200ms")
    worker.queue("line", concurrency=1)

    @worker.workflow("held")
    async def held(ctx: WorkflowContext, data: Any) -> None:
        await ctx.wait_for_event("go")

    async with worker:
        for i in range(3):
            await worker.start("held", i, queue="line")
        for _ in range(100):
            depth = [
                p
                for p in _points(reader).get("pikku.queue.depth", [])
                if p.attributes.get("queue") == "line" and p.value == 2
            ]
            if depth:
                break
            await asyncio.sleep(0.1)
    assert depth


async def test_without_an_sdk_nothing_is_recorded(engine: Engine) -> None:
    assert not engine_core.metrics.enabled()

    @engine.workflow("plain")
    async def plain(ctx: WorkflowContext, data: Any) -> int:
        return 1

    async with engine:
        assert await engine.result(await engine.start("plain"), timeout=10) == 1


async def test_slots_in_use_are_read_when_collected(
    engine: Engine, reader: InMemoryMetricReader
) -> None:
    seen: list[float] = []

    def look() -> None:
        seen.append(_total(_points(reader)["pikku.worker.slots.used"]))

    @engine.workflow("looks")
    async def looks(ctx: WorkflowContext, data: Any) -> None:
        await ctx.step("look", look)

    async with engine:
        await engine.result(await engine.start("looks"), timeout=10)
    assert seen == [1]
    assert _total(_points(reader)["pikku.worker.slots.used"]) == 0
