"""Inputs a user can get wrong get the engine's own error at the call; a huge error
message never makes a step or a run too large to record."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import pytest

from engine_core import (
    Engine,
    InvalidDurationError,
    InvalidLimitError,
    NotSerializableError,
    WorkflowContext,
    current_step,
)
from engine_core.common.journal import JOURNAL_BYTES, merged
from engine_core.common.values import stored_size
from engine_core.memory import InMemoryStore
from engine_core.records import StepRecord
from engine_core.run.journal_room import journal_room, outcome_size


async def test_a_huge_error_message_keeps_the_retry(engine: Engine) -> None:
    def flaky() -> str:
        info = current_step()
        assert info is not None
        if info.attempt == 1:
            raise RuntimeError("x" * (9 * 1024 * 1024))  # over half of 16 MiB, twice
        return "second attempt"

    @engine.workflow("w")
    async def w(ctx: WorkflowContext, data: Any) -> str:
        return str(await ctx.step("s", flaky, retries=1))

    async with engine:
        run_id = await engine.start("w")
        assert await engine.result(run_id, timeout=30) == "second attempt"
    history = [e for e in await engine.history(run_id) if e.status == "failed"]
    assert history and len(history[0].error["message"]) < 64 * 1024  # type: ignore[index]
    assert "characters cut" in history[0].error["message"]  # type: ignore[index]


async def test_a_huge_error_that_fails_the_run_is_recorded(engine: Engine) -> None:
    @engine.workflow("w")
    async def w(ctx: WorkflowContext, data: Any) -> None:
        await ctx.step("s", lambda: (_ for _ in ()).throw(ValueError("y" * 20_000_000)))

    async with engine:
        run_id = await engine.start("w")
        with pytest.raises(Exception, match="characters cut"):
            await engine.result(run_id, timeout=30)
    assert (await engine.status(run_id)).status == "failed"


async def test_a_deep_input_is_not_serializable(engine: Engine) -> None:
    @engine.workflow("w")
    async def w(ctx: WorkflowContext, data: Any) -> None:
        return None

    deep: Any = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(NotSerializableError, match="nested too deeply"):
        await engine.start("w", deep)


async def test_an_absurd_page_size_is_refused(engine: Engine) -> None:
    for bad in (10**30, 0, -1, True, 2.5):
        with pytest.raises(InvalidLimitError):
            await engine.list_runs(limit=bad)  # type: ignore[arg-type]
    assert issubclass(InvalidLimitError, ValueError)


async def test_an_absurd_sleep_is_refused_at_the_call(engine: Engine) -> None:
    @engine.workflow("w")
    async def w(ctx: WorkflowContext, data: Any) -> None:
        await ctx.sleep("forever", 10**12)

    async with engine:
        run_id = await engine.start("w")
        with pytest.raises(Exception, match="longer than 100 years"):
            await engine.result(run_id, timeout=10)
    error = (await engine.status(run_id)).error
    assert error is not None and error["type"] == "InvalidDurationError"
    with pytest.raises(InvalidDurationError):
        Engine(engine.store, lease_ttl=10**12)


async def test_an_input_and_output_past_one_document_together_are_kept(engine: Engine) -> None:
    """Together past MongoDB's 16 MiB for one document: kept all the same (MongoStore
    keeps each in GridFS, past its ``offload_over``), read back whole."""
    big = "z" * (9 * 1024 * 1024)

    @engine.workflow("w")
    async def w(ctx: WorkflowContext, data: Any) -> str:
        return data + "!"

    async with engine:
        run_id = await engine.start("w", big)
        assert await engine.result(run_id, timeout=60) == big + "!"
    status = await engine.status(run_id)
    assert status.input == big and status.output == big + "!"


async def test_an_output_that_leaves_the_journal_no_room_keeps_every_outcome() -> None:
    """Sixteen large outcomes fill the run's journal; an input and an output that take
    nearly all of one record then leave it too little room, and the run's last write
    moves outcomes to their step records first: the record stays within its room and no
    outcome is lost. (In memory: MongoStore pages a long run's journal by count.)"""
    store = InMemoryStore()
    engine = Engine(store)
    half = "h" * 7_860_000  # two of them: just under the 15 MiB they may take together
    result = "r" * 64_500  # just under the 64 KiB an outcome may take in the journal

    async def step() -> str:
        return result

    @engine.workflow("w")
    async def w(ctx: WorkflowContext, data: Any) -> str:
        for i in range(16):  # about 1 MiB of outcomes for the journal
            await ctx.step(f"s{i}", step)
        return half

    async with engine:
        run_id = await engine.start("w", half)
        assert await engine.result(run_id, timeout=60) == half
    run = await store.get_run(run_id)
    assert run is not None and run.journal
    kept = sum(outcome_size(s) for s in run.journal.values())
    assert kept <= journal_room(stored_size(half) * 2)
    saved = await store.get_steps(run_id, [f"s{i}" for i in range(16)])
    assert saved  # moved out of the journal
    steps = merged(run, saved)
    assert sorted(steps) == sorted(f"s{i}" for i in range(16))
    assert all(s.status == "succeeded" and s.result == result for s in steps.values())


async def test_a_step_cancelled_while_outcomes_move_keeps_a_siblings_room() -> None:
    """The body gives up on a step (a timeout) while its start moves an outcome that no
    longer fits to its step record; a sibling's outcome was journaled meanwhile. The
    journal's count keeps the sibling's entry, so the outcomes that follow still keep
    the run's journal within its room. (Before, the cancelled start put back the count
    it had begun from, and the journal grew past its room by the sibling's entry.)"""
    store = InMemoryStore()
    engine = Engine(store)
    large = "r" * 64_500  # sixteen of them nearly fill the journal's room
    moving = asyncio.Event()
    save_steps = store.save_steps

    async def slow_save_steps(steps: Sequence[StepRecord]) -> None:
        # "s16@1": the seventeenth step of the body's second task (it keys its own).
        if not moving.is_set() and any(s.key == "s16@1" for s in steps):
            moving.set()
            await asyncio.sleep(10)  # cancelled by the body's timeout
        await save_steps(steps)

    store.save_steps = slow_save_steps  # type: ignore[method-assign]

    async def big() -> str:
        return large

    async def sibling() -> str:
        await moving.wait()
        return "y" * 10_000  # fits in what the journal has left

    async def last() -> str:
        return "z" * 5_000  # fits only if the sibling's entry is not counted

    async def in_turn(ctx: WorkflowContext) -> None:
        for i in range(17):  # the seventeenth no longer fits: the next start moves it
            await ctx.step(f"s{i}", big)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.5):
                await ctx.step("x", big)
        await ctx.step("z", last)

    @engine.workflow("w")
    async def w(ctx: WorkflowContext, data: Any) -> str:
        await asyncio.gather(ctx.step("y", sibling), in_turn(ctx))
        return "ok"

    async with engine:
        run_id = await engine.start("w")
        assert await engine.result(run_id, timeout=60) == "ok"
    run = await store.get_run(run_id)
    assert run is not None and "y" in run.journal
    kept = sum(outcome_size(s) for s in run.journal.values())
    assert kept <= journal_room(stored_size(None) + stored_size("ok")), kept - JOURNAL_BYTES
    steps = merged(run, await store.get_steps(run_id, ["s16@1", "z@1"]))
    assert steps["s16@1"].result == large and steps["z@1"].result == "z" * 5_000
