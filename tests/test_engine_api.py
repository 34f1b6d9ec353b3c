"""The public API: starting runs, reading them, and the errors bad input gets."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from engine_core import (
    Engine,
    EngineError,
    InvalidDurationError,
    InvalidNameError,
    InvalidOptionError,
    InvalidRunIdError,
    NotSerializableError,
    RunNotFoundError,
    ValueTooLargeError,
    WorkflowContext,
    WorkflowNotRegisteredError,
    WorkflowRunFailedError,
    current_step,
)
from engine_core.memory import InMemoryStore


def register_double(engine: Engine) -> None:
    @engine.workflow("double")
    async def double(ctx: WorkflowContext, data: dict[str, Any]) -> dict[str, Any]:
        value = await ctx.step("times-two", lambda n: n * 2, data["n"])
        return {"value": value}


async def test_a_run_completes_and_reports_its_steps(engine: Engine) -> None:
    register_double(engine)
    async with engine:
        run_id = await engine.start("double", {"n": 21})
        assert await engine.result(run_id, timeout=10) == {"value": 42}
        status = await engine.status(run_id)
    assert status.run_id == run_id and status.workflow == "double"
    assert status.status == "completed" and status.output == {"value": 42}
    assert status.error is None
    step = status.steps["times-two"]
    assert (step.status, step.attempts, step.result, step.error) == ("succeeded", 1, 42, None)


async def test_start_is_idempotent_by_run_id(engine: Engine) -> None:
    calls: list[int] = []

    @engine.workflow("once")
    async def once(ctx: WorkflowContext, data: int) -> int:
        return int(await ctx.step("s", lambda: calls.append(data) or data))

    async with engine:
        first = await engine.start("once", 1, run_id="order-7")
        second = await engine.start("once", 2, run_id="order-7")
        assert first == second == "order-7"
        assert await engine.result("order-7", timeout=10) == 1
    assert calls == [1]


async def test_generated_run_ids_are_unique(engine: Engine) -> None:
    register_double(engine)
    ids = {await engine.start("double", {"n": 1}) for _ in range(5)}
    assert len(ids) == 5


async def test_run_id_of_another_workflow_is_refused(engine: Engine) -> None:
    register_double(engine)

    @engine.workflow("other")
    async def other(ctx: WorkflowContext, data: Any) -> None:
        return None

    await engine.start("double", {"n": 1}, run_id="shared")
    with pytest.raises(InvalidRunIdError, match="already belongs to a run of workflow 'double'"):
        await engine.start("other", None, run_id="shared")
    assert (await engine.status("shared")).workflow == "double"


@pytest.mark.parametrize(
    "bad", [{"$ne": None}, {"$gt": ""}, "", "x" * 201, 7, None.__class__, ["a"]]
)
async def test_bad_run_ids_are_refused(engine: Engine, bad: Any) -> None:
    register_double(engine)
    with pytest.raises(InvalidRunIdError):
        await engine.start("double", {"n": 1}, run_id=bad)
    with pytest.raises(InvalidRunIdError):
        await engine.status(bad)
    assert await engine.list_runs() == []


async def test_operator_strings_are_plain_run_ids(engine: Engine) -> None:
    register_double(engine)
    async with engine:
        for run_id in ("$ne", "$where", "a.b", "{'$gt': ''}"):
            assert await engine.start("double", {"n": 2}, run_id=run_id) == run_id
            assert await engine.result(run_id, timeout=10) == {"value": 4}
    assert sorted(r.run_id for r in await engine.list_runs()) == sorted(
        ["$ne", "$where", "a.b", "{'$gt': ''}"]
    )


async def test_unknown_workflow_fails_at_once_even_as_a_client(engine: Engine) -> None:
    register_double(engine)
    with pytest.raises(WorkflowNotRegisteredError, match="no workflow named 'dubble'"):
        await engine.start("dubble", {})
    assert await engine.list_runs() == []


async def test_unknown_runs_raise_run_not_found(engine: Engine) -> None:
    for call in (
        engine.status("nope"),
        engine.result("nope", timeout=1),
        engine.cancel("nope"),
        engine.suspend("nope"),
        engine.resume("nope"),
        engine.send_event("nope", "ev", 1),
        engine.history("nope"),
    ):
        with pytest.raises(RunNotFoundError, match="no run has id 'nope'"):
            await call


async def test_unserialisable_input_is_refused_and_nothing_is_stored(engine: Engine) -> None:
    register_double(engine)
    with pytest.raises(NotSerializableError, match=r"input of workflow 'double'.*object"):
        await engine.start("double", {"n": object()}, run_id="r")
    with pytest.raises(RunNotFoundError):
        await engine.status("r")
    assert issubclass(NotSerializableError, TypeError)


@pytest.mark.parametrize("bad", ["soon", "5 parsecs", -1, "1x", float("nan"), True])
async def test_bad_durations_are_refused(make_engine: Callable[..., Engine], bad: Any) -> None:
    with pytest.raises(InvalidDurationError):
        make_engine(lease_ttl=bad)
    assert issubclass(InvalidDurationError, ValueError)


async def test_bad_sleep_duration_fails_the_run_with_a_clear_error(engine: Engine) -> None:
    @engine.workflow("nap")
    async def nap(ctx: WorkflowContext, data: Any) -> None:
        await ctx.sleep("nap", "forever")

    async with engine:
        run_id = await engine.start("nap")
        with pytest.raises(WorkflowRunFailedError, match="'forever' is not a duration"):
            await engine.result(run_id, timeout=10)
    error = (await engine.status(run_id)).error
    assert error is not None and error["type"] == "InvalidDurationError"


async def test_every_error_is_an_engine_error() -> None:
    import engine_core

    for name in engine_core.__all__:
        obj = getattr(engine_core, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, EngineError), name


async def test_result_times_out_while_the_run_waits(engine: Engine) -> None:
    @engine.workflow("waits")
    async def waits(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("never")

    async with engine:
        run_id = await engine.start("waits")
        with pytest.raises(TimeoutError, match="still running"):
            await engine.result(run_id, timeout=0.3)


async def test_a_client_engine_starts_runs_a_worker_engine_runs_them(
    make_engine: Callable[..., Engine],
) -> None:
    client, worker = make_engine(), make_engine()
    for engine in (client, worker):
        register_double(engine)
    run_id = await client.start("double", {"n": 5})
    assert (await client.status(run_id)).status == "running"
    async with worker:
        assert await client.result(run_id, timeout=10) == {"value": 10}


async def test_current_step_is_none_outside_a_step(engine: Engine) -> None:
    seen: list[Any] = []

    @engine.workflow("where")
    async def where(ctx: WorkflowContext, data: Any) -> Any:
        seen.append(current_step())
        info = await ctx.step("inside", lambda: current_step().__dict__)  # type: ignore[union-attr]
        seen.append(current_step())
        return info

    async with engine:
        run_id = await engine.start("where", run_id="r-1")
        info = await engine.result(run_id, timeout=10)
    assert seen == [None, None]
    assert info["run_id"] == "r-1" and info["step"] == "inside" and info["attempt"] == 1
    assert info["idempotency_key"] == str(uuid.uuid5(uuid.NAMESPACE_URL, '["r-1", "inside"]'))


async def test_list_runs_filters_and_pages(engine: Engine) -> None:
    register_double(engine)
    for i in range(5):
        await engine.start("double", {"n": i}, run_id=f"run-{i}")
    page = await engine.list_runs(limit=2)  # newest first
    assert [r.run_id for r in page] == ["run-4", "run-3"]
    rest = await engine.list_runs(after="run-3", status="running", workflow="double")
    assert [r.run_id for r in rest] == ["run-2", "run-1", "run-0"]
    oldest = await engine.list_runs(limit=2, order="oldest")
    assert [r.run_id for r in oldest] == ["run-0", "run-1"]
    by_id = await engine.list_runs(after="run-1", order="id")
    assert [r.run_id for r in by_id] == ["run-2", "run-3", "run-4"]
    with pytest.raises(InvalidOptionError, match="order must be one of 'newest', 'oldest'"):
        await engine.list_runs(order="sideways")


async def test_a_value_over_the_document_limit_is_kept_whole(engine: Engine) -> None:
    """A step result past MongoDB's 16 MiB for one document (MongoStore keeps it in
    GridFS, docs/guides/data-at-rest.md) completes and reads back whole."""
    big = "x" * (16 * 1024 * 1024 + 10)

    @engine.workflow("huge")
    async def huge(ctx: WorkflowContext, data: Any) -> int:
        await ctx.step("small", lambda: "fine")
        return len(await ctx.step("big", lambda: big))

    async with engine:
        run_id = await engine.start("huge")
        assert await engine.result(run_id, timeout=60) == len(big)
    status = await engine.status(run_id)
    assert status.steps["small"].result == "fine" and status.steps["big"].result == big


async def test_a_value_past_max_value_fails_that_step_clearly() -> None:
    """In memory as on MongoDB (tests/mongo/test_offload.py): a step result past the
    store's ``max_value`` fails that step, not retried; a larger input raises at the
    call."""
    engine = Engine(InMemoryStore(max_value="1MiB"))

    @engine.workflow("huge")
    async def huge(ctx: WorkflowContext, data: Any) -> None:
        await ctx.step("small", lambda: "fine")
        await ctx.step("big", lambda: "x" * (2 * 1024 * 1024), retries=3)

    async with engine:
        with pytest.raises(ValueTooLargeError, match="over the store's limit"):
            await engine.start("huge", "y" * (2 * 1024 * 1024))
        run_id = await engine.start("huge")
        with pytest.raises(WorkflowRunFailedError, match=r"result of step 'big' is .* bytes"):
            await engine.result(run_id, timeout=30)
    status = await engine.status(run_id)
    assert status.status == "failed" and status.steps["small"].result == "fine"
    big = status.steps["big"]
    assert big.status == "failed" and big.error is not None and big.attempts == 1
    assert big.error["type"] == "ValueTooLargeError" and "max_value" in big.error["message"]


@pytest.mark.parametrize("bad", [{"$ne": 1}, {"$gt": ""}, 5, ""])
async def test_operator_shaped_names_are_refused(engine: Engine, bad: Any) -> None:
    @engine.workflow("names")
    async def names(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("go")

    async with engine:
        run_id = await engine.start("names")
        with pytest.raises(InvalidNameError):
            await engine.send_event(run_id, bad, 1)
    with pytest.raises(InvalidNameError):
        engine.workflow(bad)
    assert issubclass(InvalidNameError, ValueError)
