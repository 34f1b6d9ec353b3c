"""``Engine(always_replay=True)`` (docs/guides/testing.md): each pass ends after every step
it records and the next replays the body from the top, on both stores. A deterministic
workflow ends as it would without it, each step's function called once; one that names
its steps from ``random`` fails its test with ``NonDeterminismError``."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from engine_core import Engine, NonDeterminismError, StepFailedError, WorkflowContext


def _counted(calls: Counter[str]) -> Callable[..., Any]:
    async def work(name: str, fail_first: int = 0) -> str:
        calls[name] += 1
        if calls[name] <= fail_first:
            raise RuntimeError(f"{name} failed (try {calls[name]})")
        return name

    return work


def _everything(engine: Engine, calls: Counter[str], entries: list[str]) -> None:
    """A workflow with a step of each kind: inline steps, a retried one, a failed one it
    catches, two concurrent branches, a sleep, an event wait, a child run."""
    work = _counted(calls)

    @engine.workflow("leaf")
    async def leaf(ctx: WorkflowContext, n: int) -> int:
        await ctx.step("leaf-work", work, f"leaf-{n}")
        return n * 10

    @engine.workflow("everything")
    async def everything(ctx: WorkflowContext, data: Any) -> list[Any]:
        entries.append("entered")
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


async def _run_everything(engine: Engine) -> tuple[Any, Counter[str], list[str]]:
    """Run ``everything`` on ``engine``: its result, its functions' calls, its passes."""
    calls: Counter[str] = Counter()
    entries: list[str] = []
    _everything(engine, calls, entries)
    async with engine:
        run_id = await engine.start("everything")
        while (await engine.status(run_id)).steps.get("go") is None:
            await asyncio.sleep(0.02)
        await engine.send_event(run_id, "go", "went")
        result = await engine.result(run_id, timeout=30)
    return result, calls, entries


async def test_a_deterministic_workflow_replays_each_step_and_runs_each_once(
    make_engine: Callable[..., Engine],
) -> None:
    result, calls, entries = await _run_everything(make_engine(always_replay=True))
    assert result == ["a", "flaky", "caught", "left", "right", "went", 40]
    # Each function ran as often as its retries ask, never again on a replay.
    assert calls == {"a": 1, "flaky": 3, "broken": 1, "left": 1, "right": 1, "leaf-4": 1}
    # The body began again after each recorded outcome: a, flaky, broken, the two
    # branches (one or two passes), the sleep, the event, the child, and the last pass.
    assert len(entries) >= 8


async def test_without_it_the_same_workflow_runs_in_far_fewer_passes(
    make_engine: Callable[..., Engine],
) -> None:
    result, _, entries = await _run_everything(make_engine())
    assert result == ["a", "flaky", "caught", "left", "right", "went", 40]
    assert len(entries) <= 4  # the first pass, and after the sleep, event and child


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
