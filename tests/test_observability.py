"""Tracing, trace ids in logs, the run mirror and the timeline."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from engine_core import (
    Engine,
    TraceIdFilter,
    WorkflowContext,
    WorkflowRunFailedError,
    current_step,
)
from engine_core.records import RunRecord, StepRecord
from engine_core.tracing import parse_traceparent

_exporter = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    # The global provider can be set once per process; later tests reuse it.
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_exporter))
        trace.set_tracer_provider(provider)
    _exporter.clear()
    yield _exporter
    _exporter.clear()


async def test_each_attempt_is_a_span_in_the_runs_trace(
    engine: Engine, spans: InMemorySpanExporter
) -> None:
    def flaky() -> str:
        info = current_step()
        assert info is not None
        if info.attempt == 1:
            raise RuntimeError("first try")
        return "ok"

    @engine.workflow("traced")
    async def traced(ctx: WorkflowContext, data: Any) -> str:
        await ctx.step("one", lambda: 1)
        await ctx.sleep("pause", "20ms")  # a second pass: still the same trace
        return str(await ctx.step("two", flaky, retries=1))

    async with engine:
        run_id = await engine.start("traced")
        await engine.result(run_id, timeout=10)
    run = await engine.store.get_run(run_id)
    assert run is not None
    parsed = parse_traceparent(run.wire["traceparent"])
    assert parsed is not None
    finished = [
        s
        for s in spans.get_finished_spans()
        if s.attributes and s.attributes.get("workflow.run_id") == run_id
    ]
    assert [(s.name, s.attributes["workflow.attempt"]) for s in finished] == [  # type: ignore[index]
        ("one", 1),
        ("two", 1),
        ("two", 2),
    ]
    assert {format(s.context.trace_id, "032x") for s in finished} == {parsed[0]}
    failed = finished[1]
    assert failed.status.status_code is StatusCode.ERROR
    assert any(e.name == "exception" for e in failed.events)
    assert finished[0].attributes["workflow.name"] == "traced"  # type: ignore[index]


async def test_a_run_started_inside_a_span_joins_its_trace(
    engine: Engine, spans: InMemorySpanExporter
) -> None:
    @engine.workflow("joined")
    async def joined(ctx: WorkflowContext, data: Any) -> None:
        await ctx.step("s", lambda: None)

    tracer = trace.get_tracer("test")
    async with engine:
        with tracer.start_as_current_span("request") as outer:
            run_id = await engine.start("joined")
        await engine.result(run_id, timeout=10)
    step_span = next(s for s in spans.get_finished_spans() if s.name == "s")
    assert step_span.context.trace_id == outer.get_span_context().trace_id


async def test_logs_in_a_step_carry_the_trace_id(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    logger = logging.getLogger("user.code")

    @engine.workflow("logs")
    async def logs(ctx: WorkflowContext, data: Any) -> None:
        await ctx.step("s", lambda: logger.warning("inside the step"))

    caplog.handler.addFilter(TraceIdFilter())
    async with engine:
        run_id = await engine.start("logs")
        await engine.result(run_id, timeout=10)
    run = await engine.store.get_run(run_id)
    assert run is not None
    record = next(r for r in caplog.records if r.getMessage() == "inside the step")
    assert record.run_id == run_id  # type: ignore[attr-defined]
    assert record.trace_id == run.wire["traceparent"].split("-")[1]  # type: ignore[attr-defined]


class ListMirror:
    def __init__(self, fail: bool = False) -> None:
        self.runs: list[tuple[str, str]] = []
        self.steps: list[tuple[str, str]] = []
        self.fail = fail

    async def run_changed(self, run: RunRecord) -> None:
        self.runs.append((run.run_id, run.status))
        if self.fail:
            raise ConnectionError("mirror down")

    async def step_changed(self, step: StepRecord) -> None:
        self.steps.append((step.key, step.status))
        if self.fail:
            raise ConnectionError("mirror down")


@pytest.mark.parametrize("fail", [False, True])
async def test_the_mirror_sees_transitions_and_never_fails_a_run(
    make_engine: Any, fail: bool
) -> None:
    mirror = ListMirror(fail=fail)
    engine: Engine = make_engine(mirror=mirror)

    @engine.workflow("mirrored")
    async def mirrored(ctx: WorkflowContext, data: Any) -> int:
        await ctx.step("a", lambda: 1)
        await ctx.sleep("nap", "10ms")
        return 2

    async with engine:
        run_id = await engine.start("mirrored")
        assert await engine.result(run_id, timeout=10) == 2
    assert mirror.runs == [(run_id, "running"), (run_id, "completed")]
    assert mirror.steps == [("a", "succeeded"), ("nap", "scheduled"), ("nap", "succeeded")]


async def test_history_is_a_timeline_of_every_attempt(engine: Engine) -> None:
    def flaky() -> None:
        info = current_step()
        assert info is not None
        if info.attempt == 1:
            raise RuntimeError("no")

    @engine.workflow("timeline")
    async def timeline_wf(ctx: WorkflowContext, data: Any) -> None:
        await ctx.step("s", flaky, retries=1)
        await ctx.sleep("nap", "10ms")

    async with engine:
        run_id = await engine.start("timeline")
        await engine.result(run_id, timeout=10)
    entries = [(e.step, e.attempt, e.status) for e in await engine.history(run_id)]
    assert entries == [
        ("s", 1, "running"),
        ("s", 1, "failed"),
        ("s", 2, "running"),
        ("s", 2, "succeeded"),
        ("nap", 0, "scheduled"),
        ("nap", 1, "succeeded"),
    ]


async def test_the_recovered_attempt_is_in_the_same_trace(
    make_engine: Any, spans: InMemorySpanExporter
) -> None:
    crashed: list[int] = []

    def dies_once() -> str:
        if not crashed:
            crashed.append(1)
            raise asyncio.CancelledError()  # the process dies mid-step
        return "recovered"

    first: Engine = make_engine()
    second: Engine = make_engine()  # another process, after the crash
    for engine in (first, second):

        @engine.workflow("crash-trace")
        async def crash_trace(ctx: WorkflowContext, data: Any) -> str:
            await ctx.step("before", lambda: 1)
            return str(await ctx.step("fragile", dies_once, retries=1))

    run_id = await first.start("crash-trace")
    with pytest.raises(asyncio.CancelledError):
        await first.drive(run_id)
    await second.store.request_pass(run_id)
    await second.drive(run_id)
    assert await second.result(run_id, timeout=5) == "recovered"
    mine = [
        s
        for s in spans.get_finished_spans()
        if s.attributes and s.attributes.get("workflow.run_id") == run_id
    ]
    assert [(s.name, s.attributes["workflow.attempt"]) for s in mine] == [  # type: ignore[index]
        ("before", 1),
        ("fragile", 1),
        ("fragile", 2),
    ]
    assert len({s.context.trace_id for s in mine}) == 1


async def test_user_lines_in_steps_compensations_and_jobs_carry_their_context(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """A line logged by a step's code names the run, its trace, its workflow and the
    step; so does a line of a compensation, and of a dispatched step."""
    logger = logging.getLogger("user.code")

    def charge() -> str:
        logger.warning("charging")
        return "ch-1"

    def refund(charge_id: str) -> None:
        logger.warning("refunding %s", charge_id)

    def pack() -> None:
        raise RuntimeError("out of boxes")

    @engine.step_function("notify")
    async def notify(payload: Any) -> None:
        logger.warning("notifying")

    @engine.workflow("order")
    async def order(ctx: WorkflowContext, data: Any) -> None:
        await ctx.step("charge", charge, compensate=refund)
        await ctx.dispatch("tell", "notify", {})
        await ctx.step("pack", pack)

    caplog.handler.addFilter(TraceIdFilter())
    async with engine:
        run_id = await engine.start("order")
        with pytest.raises(WorkflowRunFailedError):
            await engine.result(run_id, timeout=10)
    trace = (await engine.status(run_id)).trace_id
    seen = {
        r.getMessage(): (r.run_id, r.trace_id, r.workflow, r.step)  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name == "user.code"
    }
    assert seen == {
        "charging": (run_id, trace, "order", "charge"),
        "notifying": (run_id, trace, "order", "tell"),
        "refunding ch-1": (run_id, trace, "order", "compensate:charge"),
    }
