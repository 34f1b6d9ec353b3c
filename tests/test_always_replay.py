"""``Engine(always_replay=True)`` (docs/guides/testing.md): each pass ends after every step
it records and the next replays the body from the top, on both stores. A deterministic
workflow ends as it would without it, each step's function called once; one that names
its steps from ``random`` fails its test with ``NonDeterminismError``."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_core import (
    Engine,
    NonDeterminismError,
    StepFailedError,
    WorkflowContext,
    WorkflowRunFailedError,
)
from engine_core.memory import InMemoryStore
from engine_core.store import Store
from tests.conftest import mongo_store


def _counted(calls: Counter[str], passes: dict[str, int] | None = None) -> Callable[..., Any]:
    """A step function counting its ``calls`` by name (and, with ``passes``, noting the
    pass of the body that first called it, as ``len(passes["body"])``)."""

    async def work(name: str, fail_first: int = 0) -> str:
        calls[name] += 1
        if passes is not None:
            passes.setdefault(name, passes["body"])
        if calls[name] <= fail_first:
            raise RuntimeError(f"{name} failed (try {calls[name]})")
        return name

    return work


def _everything(engine: Engine, calls: Counter[str], passes: dict[str, int]) -> None:
    """A workflow with a step of each kind: inline steps, a retried one, a failed one it
    catches, two concurrent branches, a sleep, an event wait, a child run. ``passes``:
    how many times the body began (``"body"``), and in which pass each step first ran."""
    work = _counted(calls, passes)

    @engine.workflow("leaf")
    async def leaf(ctx: WorkflowContext, n: int) -> int:
        await ctx.step("leaf-work", work, f"leaf-{n}")
        return n * 10

    @engine.workflow("everything")
    async def everything(ctx: WorkflowContext, data: Any) -> list[Any]:
        passes["body"] += 1
        seen: list[Any] = [await ctx.step("a", work, "a")]
        seen.append(await ctx.step("flaky", work, "flaky", 2, retries=2))
        try:
            await ctx.step("broken", work, "broken", 9)
        except StepFailedError:
            seen.append("caught")
        seen += await asyncio.gather(
            ctx.step("left", work, "left"), ctx.step("right", work, "right")
        )
        await ctx.sleep("nap", "10ms")
        seen.append(await ctx.wait_for_event("go", timeout="30s"))
        seen.append(await ctx.child("kid", leaf, 4))
        return seen


async def _run_everything(engine: Engine) -> tuple[Any, Counter[str], dict[str, int]]:
    """Run ``everything`` on ``engine``: its result, its functions' calls, its passes."""
    calls: Counter[str] = Counter()
    passes = {"body": 0}
    _everything(engine, calls, passes)
    async with engine:
        run_id = await engine.start("everything")
        while (await engine.status(run_id)).steps.get("go") is None:
            await asyncio.sleep(0.02)
        await engine.send_event(run_id, "go", "went")
        result = await engine.result(run_id, timeout=30)
    return result, calls, passes


INLINE = ("a", "flaky", "broken", "left", "right")


async def test_a_deterministic_workflow_replays_each_step_and_runs_each_once(
    make_engine: Callable[..., Engine],
) -> None:
    result, calls, passes = await _run_everything(make_engine(always_replay=True))
    assert result == ["a", "flaky", "caught", "left", "right", "went", 40]
    # Each function ran as often as its retries ask, never again on a replay.
    assert calls == {"a": 1, "flaky": 3, "broken": 1, "left": 1, "right": 1, "leaf-4": 1}
    # Each inline step ran in a pass of its own, after the one before was recorded
    # (the two concurrent branches begin in the next pass, or the second a pass later).
    assert [passes[name] for name in INLINE[:3]] == [1, 2, 3]
    assert passes["left"] == 4 and passes["right"] in (4, 5)
    assert passes["body"] >= 8  # ... and the sleep, the event, the child, the last


async def test_without_it_the_inline_steps_run_in_one_pass(
    make_engine: Callable[..., Engine],
) -> None:
    result, _, passes = await _run_everything(make_engine())
    assert result == ["a", "flaky", "caught", "left", "right", "went", 40]
    assert [passes[name] for name in INLINE] == [1] * len(INLINE)


def _random_names(engine: Engine, calls: Counter[str]) -> None:
    work = _counted(calls)

    @engine.workflow("lottery")
    async def lottery(ctx: WorkflowContext, data: Any) -> str:
        ticket = await ctx.step(f"ticket-{random.randrange(10**12)}", work, "ticket")
        return await ctx.step("draw", work, ticket)


async def test_a_workflow_naming_steps_from_random_fails_with_non_determinism(
    make_engine: Callable[..., Engine],
) -> None:
    engine = make_engine(always_replay=True)
    calls: Counter[str] = Counter()
    _random_names(engine, calls)
    async with engine:
        run_id = await engine.start("lottery")
        with pytest.raises(NonDeterminismError) as diverged:
            await engine.result(run_id, timeout=30)
        status = await engine.status(run_id)
    assert diverged.value.step.startswith("ticket-") and run_id in str(diverged.value)
    assert status.status == "suspended"  # kept for an operator, as after a deploy
    assert calls == {"ticket": 1}  # the step that ran did not run again


async def test_without_it_the_random_names_pass_unnoticed(
    make_engine: Callable[..., Engine],
) -> None:
    # The bug always_replay is for: the first pass never replays, so it completes.
    engine = make_engine()
    calls: Counter[str] = Counter()
    _random_names(engine, calls)
    async with engine:
        run_id = await engine.start("lottery")
        assert await engine.result(run_id, timeout=30) == "ticket"


# Per part of a body: ("step", failures before it succeeds, 0-2), ("gather", branches,
# 1-3), ("sleep", 0) or ("caught", 0): a step that always fails, its error caught.
body_plans = st.lists(
    st.one_of(
        st.tuples(st.just("step"), st.integers(0, 2)),
        st.tuples(st.just("gather"), st.integers(1, 3)),
        st.tuples(st.sampled_from(["sleep", "caught"]), st.just(0)),
    ),
    min_size=1,
    max_size=6,
)


async def _check_plan(store: Store, plan: list[tuple[str, int]]) -> None:
    engine = Engine(store, lease_ttl="5s", always_replay=True)
    calls: Counter[str] = Counter()
    work = _counted(calls)
    passes: list[int] = []

    @engine.workflow("planned")
    async def planned(ctx: WorkflowContext, data: Any) -> list[Any]:
        passes.append(1)
        out: list[Any] = []
        for i, (kind, n) in enumerate(plan):
            if kind == "step":
                out.append(await ctx.step(f"s{i}", work, f"s{i}", n, retries=2))
            elif kind == "gather":
                parts = [ctx.step(f"g{i}-{b}", work, f"g{i}-{b}") for b in range(n)]
                out += await asyncio.gather(*parts)
            elif kind == "sleep":
                await ctx.sleep(f"z{i}", 0)
            else:
                with contextlib.suppress(StepFailedError):
                    await ctx.step(f"c{i}", work, f"c{i}", 9)
        return out

    async with engine:
        output = await engine.result(await engine.start("planned"), timeout=30)
    expected: list[Any] = []
    ran: Counter[str] = Counter()
    for i, (kind, n) in enumerate(plan):
        if kind == "step":
            expected.append(f"s{i}")
            ran[f"s{i}"] = n + 1
        elif kind == "gather":
            expected += [f"g{i}-{b}" for b in range(n)]
            ran.update({f"g{i}-{b}": 1 for b in range(n)})
        elif kind == "caught":
            ran[f"c{i}"] = 1
    assert output == expected
    assert calls == ran  # each attempt once: a replay never runs a step again
    assert len(passes) > len(plan)  # a pass after each part's outcome, and the last


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(plan=body_plans)
@pytest.mark.parametrize("store_kind", ["memory", "mongo"])
def test_any_deterministic_body_completes_with_each_attempt_run_once(
    request: pytest.FixtureRequest, store_kind: str, plan: list[tuple[str, int]]
) -> None:
    uri = request.getfixturevalue("nx_uri") if store_kind == "mongo" else None

    async def run() -> None:
        store: Store = InMemoryStore() if uri is None else await mongo_store(uri)
        try:
            await _check_plan(store, plan)
        finally:
            await store.close()

    asyncio.run(run())


async def test_dispatched_steps_and_stream_writes_replay_exactly_once(
    make_engine: Callable[..., Engine],
) -> None:
    engine = make_engine(always_replay=True)
    calls: Counter[str] = Counter()
    work = _counted(calls)

    @engine.step_function("job")
    async def job(payload: dict[str, int]) -> dict[str, int]:
        calls["job"] += 1
        return {"got": payload["n"]}

    @engine.workflow("streamed")
    async def streamed(ctx: WorkflowContext, data: Any) -> list[Any]:
        await ctx.write_stream("progress", "a")
        first = await ctx.dispatch("j1", "job", {"n": 1})
        await ctx.write_stream("progress", "b")
        middle = await ctx.step("inline", work, "inline")
        await ctx.write_stream("progress", "c")
        return [first, middle, await ctx.dispatch("j2", "job", {"n": 3})]

    async with engine:
        run_id = await engine.start("streamed")
        assert await engine.result(run_id, timeout=30) == [{"got": 1}, "inline", {"got": 3}]
        progress = [e.value async for e in engine.read_stream(run_id, "progress", timeout=5)]
    assert progress == ["a", "b", "c"]  # each written once, though the body ran 4 times
    assert calls == {"job": 2, "inline": 1}


async def test_compensations_and_patches_replay_once(make_engine: Callable[..., Engine]) -> None:
    engine = make_engine(always_replay=True)
    calls: Counter[str] = Counter()
    work = _counted(calls)

    async def undo(result: str) -> None:
        calls[f"undo-{result}"] += 1

    @engine.workflow("booking")
    async def booking(ctx: WorkflowContext, data: Any) -> None:
        await ctx.step("hotel", work, "hotel", compensate=undo)
        await ctx.step("flight", work, "flight", compensate=undo)
        if await ctx.patched("insurance"):
            await ctx.step("insure", work, "insure")
        await ctx.step("car", work, "car", 9)  # fails: the two before are undone

    async with engine:
        run_id = await engine.start("booking")
        with pytest.raises(WorkflowRunFailedError):
            await engine.result(run_id, timeout=30)
        status = await engine.status(run_id)
    assert status.status == "compensated" and status.patches == ["insurance"]
    assert calls == {
        "hotel": 1, "flight": 1, "insure": 1, "car": 1, "undo-flight": 1, "undo-hotel": 1
    }  # fmt: skip
