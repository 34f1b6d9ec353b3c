"""Inline steps: memoised replay, ordinals, concurrency, retries, failures."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from engine_core import (
    Engine,
    StepFailedError,
    WorkflowContext,
    WorkflowRunFailedError,
    current_step,
)


async def test_finished_steps_never_run_again_on_replay(engine: Engine) -> None:
    calls: list[str] = []

    def record(name: str) -> str:
        calls.append(name)
        return f"{name}-done"

    @engine.workflow("replay")
    async def replay(ctx: WorkflowContext, data: Any) -> list[str]:
        a = await ctx.step("a", record, "a")
        await ctx.sleep("pause", "50ms")  # ends the pass; the next pass replays "a"
        b = await ctx.step("b", record, "b")
        return [a, b]

    async with engine:
        run_id = await engine.start("replay")
        assert await engine.result(run_id, timeout=10) == ["a-done", "b-done"]
    assert calls == ["a", "b"]


async def test_a_name_reached_again_gets_ordinals(engine: Engine) -> None:
    @engine.workflow("loop")
    async def loop(ctx: WorkflowContext, data: Any) -> list[int]:
        out = []
        for i in range(3):
            out.append(await ctx.step("item", lambda i=i: i * 10))
        return out

    async with engine:
        run_id = await engine.start("loop")
        assert await engine.result(run_id, timeout=10) == [0, 10, 20]
    steps = (await engine.status(run_id)).steps
    assert {k: v.result for k, v in steps.items()} == {"item": 0, "item#1": 10, "item#2": 20}


async def test_gathered_steps_run_concurrently_and_are_each_checkpointed(engine: Engine) -> None:
    started: list[int] = []
    all_started = asyncio.Event()

    async def part(i: int) -> int:
        started.append(i)
        if len(started) == 3:
            all_started.set()
        await asyncio.wait_for(all_started.wait(), 5)  # deadlocks unless concurrent
        return i

    @engine.workflow("fan")
    async def fan(ctx: WorkflowContext, data: Any) -> list[int]:
        return list(await asyncio.gather(*(ctx.step(f"part-{i}", part, i) for i in range(3))))

    async with engine:
        run_id = await engine.start("fan")
        assert await engine.result(run_id, timeout=10) == [0, 1, 2]
    steps = (await engine.status(run_id)).steps
    assert all(steps[f"part-{i}"].status == "succeeded" for i in range(3))


async def test_retries_with_fixed_delay_count_attempts(engine: Engine) -> None:
    attempts: list[int] = []

    def flaky() -> str:
        info = current_step()
        assert info is not None
        attempts.append(info.attempt)
        if info.attempt < 3:
            raise ConnectionError(f"try {info.attempt}")
        return "ok"

    @engine.workflow("flaky")
    async def flaky_wf(ctx: WorkflowContext, data: Any) -> str:
        return str(await ctx.step("call", flaky, retries=3, retry_delay="10ms"))

    async with engine:
        run_id = await engine.start("flaky")
        assert await engine.result(run_id, timeout=10) == "ok"
    assert attempts == [1, 2, 3]
    step = (await engine.status(run_id)).steps["call"]
    assert (step.status, step.attempts) == ("succeeded", 3)
    timeline = [e for e in await engine.history(run_id) if e.step == "call"]
    assert [(e.attempt, e.status) for e in timeline if e.status != "running"] == [
        (1, "failed"),
        (2, "failed"),
        (3, "succeeded"),
    ]


async def test_long_retry_delay_is_durable_not_an_in_memory_sleep(engine: Engine) -> None:
    def fails_once() -> str:
        info = current_step()
        assert info is not None
        if info.attempt == 1:
            raise RuntimeError("first")
        return "second"

    @engine.workflow("slow-retry")
    async def slow(ctx: WorkflowContext, data: Any) -> str:
        return str(await ctx.step("s", fails_once, retries=1, retry_delay="1.5s"))

    async with engine:
        run_id = await engine.start("slow-retry")
        await asyncio.sleep(0.5)
        step = (await engine.status(run_id)).steps["s"]
        # Parked on the store, not held in a sleeping pass.
        assert (step.status, step.attempts) == ("scheduled", 1)
        assert step.error is not None and step.error["message"] == "first"
        assert await engine.result(run_id, timeout=10) == "second"


async def test_exponential_retry_delay(engine: Engine) -> None:
    def fails_twice() -> int:
        info = current_step()
        assert info is not None
        if info.attempt < 2:
            raise RuntimeError("no")
        return info.attempt

    @engine.workflow("expo")
    async def expo(ctx: WorkflowContext, data: Any) -> int:
        return int(await ctx.step("s", fails_twice, retries=2, retry_delay="exponential"))

    async with engine:
        run_id = await engine.start("expo")
        assert await engine.result(run_id, timeout=10) == 2


async def test_step_failure_surfaces_in_the_body_and_can_be_caught(engine: Engine) -> None:
    seen: dict[str, Any] = {}

    def broken() -> None:
        raise KeyError("card-declined")

    @engine.workflow("catches")
    async def catches(ctx: WorkflowContext, data: Any) -> str:
        try:
            await ctx.step("charge", broken, retries=1)
        except StepFailedError as exc:
            seen.update(
                step=exc.step,
                attempts=exc.attempts,
                error_type=exc.error_type,
                message=str(exc),
                cause=type(exc.__cause__).__name__,
            )
            await ctx.sleep("then", "10ms")  # a later pass replays the failure
            return "handled"
        return "unreachable"

    async with engine:
        run_id = await engine.start("catches")
        assert await engine.result(run_id, timeout=10) == "handled"
    assert seen["step"] == "charge" and seen["attempts"] == 2
    assert seen["error_type"] == "KeyError" and "card-declined" in seen["message"]
    # The replay after the sleep has no original exception to chain.
    assert seen["cause"] == "NoneType"


async def test_failure_on_its_own_pass_chains_the_original(engine: Engine) -> None:
    causes: list[BaseException | None] = []

    @engine.workflow("chain")
    async def chain(ctx: WorkflowContext, data: Any) -> None:
        try:
            await ctx.step("s", lambda: 1 / 0)
        except StepFailedError as exc:
            causes.append(exc.__cause__)

    async with engine:
        await engine.result(await engine.start("chain"), timeout=10)
    assert isinstance(causes[0], ZeroDivisionError)


async def test_an_escaping_step_failure_fails_the_run_with_its_fields(engine: Engine) -> None:
    @engine.workflow("fails")
    async def fails(ctx: WorkflowContext, data: Any) -> None:
        await ctx.step("boom", lambda: int("x"), retries=2)

    async with engine:
        run_id = await engine.start("fails")
        with pytest.raises(WorkflowRunFailedError, match="invalid literal") as raised:
            await engine.result(run_id, timeout=10)
    status = await engine.status(run_id)
    assert status.status == "failed"
    assert status.error is not None
    assert status.error["type"] == "StepFailedError"
    assert (status.error["step"], status.error["attempts"], status.error["error_type"]) == (
        "boom",
        3,
        "ValueError",
    )
    assert raised.value.error == status.error
    assert status.steps["boom"].attempts == 3


async def test_an_exception_in_the_body_fails_the_run(engine: Engine) -> None:
    @engine.workflow("raises")
    async def raises(ctx: WorkflowContext, data: Any) -> None:
        await ctx.step("fine", lambda: 1)
        raise LookupError("no such order")

    async with engine:
        run_id = await engine.start("raises")
        with pytest.raises(WorkflowRunFailedError, match="no such order"):
            await engine.result(run_id, timeout=10)
    error = (await engine.status(run_id)).error
    assert error is not None and error["type"] == "LookupError"
    assert error["message"] == "no such order" and "stack" in error


async def test_unserialisable_step_result_fails_that_step_clearly(engine: Engine) -> None:
    calls: list[int] = []

    def returns_object() -> object:
        calls.append(1)
        return object()

    @engine.workflow("bad-result")
    async def bad(ctx: WorkflowContext, data: Any) -> None:
        await ctx.step("makes-object", returns_object, retries=3)

    async with engine:
        run_id = await engine.start("bad-result")
        with pytest.raises(WorkflowRunFailedError, match=r"'makes-object'.*object"):
            await engine.result(run_id, timeout=10)
    assert calls == [1]  # not retried: it would fail the same way
    step = (await engine.status(run_id)).steps["makes-object"]
    assert step.status == "failed" and step.error is not None
    assert step.error["type"] == "NotSerializableError"


async def test_step_timeout_fails_the_attempt(engine: Engine) -> None:
    async def slow() -> None:
        await asyncio.sleep(5)

    @engine.workflow("timeout")
    async def timeout_wf(ctx: WorkflowContext, data: Any) -> None:
        await ctx.step("slow", slow, timeout="100ms")

    async with engine:
        run_id = await engine.start("timeout")
        with pytest.raises(WorkflowRunFailedError, match="TimeoutError"):
            await engine.result(run_id, timeout=10)


async def test_step_functions_get_exactly_the_arguments_passed(engine: Engine) -> None:
    got: list[Any] = []

    async def takes(a: Any, b: Any, *rest: Any) -> None:
        got.append((a, b, rest))

    @engine.workflow("args")
    async def args(ctx: WorkflowContext, data: Any) -> None:
        await ctx.step("s", takes, 1, {"x": [1]}, "more")

    async with engine:
        await engine.result(await engine.start("args"), timeout=10)
    assert got == [(1, {"x": [1]}, ("more",))]


async def test_idempotency_key_is_the_same_across_attempts(engine: Engine) -> None:
    keys: list[str] = []

    def flaky() -> None:
        info = current_step()
        assert info is not None
        keys.append(info.idempotency_key)
        if info.attempt == 1:
            raise RuntimeError("again")

    @engine.workflow("keys")
    async def keys_wf(ctx: WorkflowContext, data: Any) -> None:
        await ctx.step("pay", flaky, retries=1)

    async with engine:
        await engine.result(await engine.start("keys"), timeout=10)
    assert len(keys) == 2 and keys[0] == keys[1]


async def test_bad_retry_arguments_fail_the_run_clearly(engine: Engine) -> None:
    @engine.workflow("bad-retries")
    async def bad(ctx: WorkflowContext, data: Any) -> None:
        await ctx.step("s", lambda: 1, retry_delay="often")

    async with engine:
        run_id = await engine.start("bad-retries")
        with pytest.raises(WorkflowRunFailedError, match="retry_delay 'often'"):
            await engine.result(run_id, timeout=10)
