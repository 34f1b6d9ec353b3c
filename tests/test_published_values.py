"""Values a run publishes (``ctx.set_value``, ``engine.get_value``), on both stores
(docs/guides/values-and-updates.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from engine_core import (
    Engine,
    InvalidNameError,
    NotSerializableError,
    RunNotActiveError,
    RunNotFoundError,
    WorkflowContext,
)
from engine_core.store import Store


def count_writes(store: Store) -> list[tuple[str, Any, bool]]:
    """Every ``put_value`` the store is asked for, with whether it landed."""
    asked: list[tuple[str, Any, bool]] = []
    put = store.put_value

    async def counted(run_id: str, key: str, value: Any, **where: Any) -> bool:
        landed = await put(run_id, key, value, **where)
        asked.append((key, value, landed))
        return landed

    store.put_value = counted  # type: ignore[method-assign]
    return asked


async def test_the_latest_value_wins_and_a_replay_writes_nothing_new(
    engine: Engine, store: Store
) -> None:
    asked = count_writes(store)

    @engine.workflow("stages")
    async def stages(ctx: WorkflowContext, data: Any) -> str:
        await ctx.set_value("stage", "packing")
        await ctx.step("pack", lambda: 1)
        await ctx.set_value("stage", "packed")
        await ctx.set_value("count", 1)
        await ctx.wait_for_event("ship")  # parks: the next pass replays from the top
        await ctx.set_value("stage", "shipped")
        return "done"

    async with engine:
        run_id = await engine.start("stages")
        assert await engine.get_value(run_id, "stage", timeout=10) in ("packing", "packed")
        await asyncio.sleep(0.2)
        assert await engine.get_value(run_id, "stage") == "packed"
        await engine.send_event(run_id, "ship")
        assert await engine.result(run_id, timeout=30) == "done"
        assert await engine.get_value(run_id, "stage") == "shipped"
        status = await engine.status(run_id)
        assert status.values == {"count": 1, "stage": "shipped"}
    # One write per call, none on the replay (the second pass reached three of them again).
    assert [(key, value) for key, value, _ in asked] == [
        ("stage", "packing"),
        ("stage", "packed"),
        ("count", 1),
        ("stage", "shipped"),
    ]
    assert all(landed for _, _, landed in asked)


async def test_a_value_is_readable_by_the_time_the_next_step_starts(
    engine: Engine, store: Store
) -> None:
    async def read_it() -> Any:
        found = await store.get_value(run_id, "stage")
        return None if found is None else found.value

    @engine.workflow("readable")
    async def readable(ctx: WorkflowContext, data: Any) -> Any:
        await ctx.set_value("stage", "set before the step")
        return await ctx.step("read", read_it)

    async with engine:
        run_id = await engine.start("readable", run_id="readable-1")
        assert await engine.result(run_id, timeout=30) == "set before the step"


async def test_get_value_waits_for_a_first_value(make_engine: Callable[..., Engine]) -> None:
    worker, client = make_engine(), make_engine()

    @worker.workflow("later")
    async def later(ctx: WorkflowContext, data: Any) -> None:
        await ctx.wait_for_event("go")
        await ctx.set_value("answer", {"n": 42})
        await ctx.wait_for_event("end")

    async with worker:
        run_id = await worker.start("later")
        waiting = asyncio.ensure_future(client.get_value(run_id, "answer", timeout=30))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        await client.send_event(run_id, "go")
        assert await waiting == {"n": 42}
        with pytest.raises(TimeoutError, match="setting value 'other'"):
            await client.get_value(run_id, "other", timeout=0.3)
        await client.send_event(run_id, "end")
        await worker.result(run_id, timeout=30)
        with pytest.raises(RunNotActiveError, match="without setting value 'other'"):
            await client.get_value(run_id, "other", timeout=30)
        assert await client.get_value(run_id, "answer") == {"n": 42}
        with pytest.raises(RunNotFoundError):
            await client.get_value("no-such-run", "answer")


async def test_a_caller_waiting_learns_that_the_run_ended_without_the_value(
    engine: Engine,
) -> None:
    @engine.workflow("never-sets")
    async def never_sets(ctx: WorkflowContext, data: Any) -> None:
        await ctx.wait_for_event("end")

    async with engine:
        run_id = await engine.start("never-sets")
        waiting = asyncio.ensure_future(engine.get_value(run_id, "x"))
        await asyncio.sleep(0.2)
        await engine.send_event(run_id, "end")
        with pytest.raises(RunNotActiveError) as caught:
            await asyncio.wait_for(waiting, 30)
        assert caught.value.status == "completed"


@dataclass
class Progress:
    done: int
    of: int


async def test_values_come_back_as_the_declared_type_and_branches_each_write(
    engine: Engine, store: Store
) -> None:
    asked = count_writes(store)

    async def part(ctx: WorkflowContext, n: int) -> None:
        for i in range(3):
            await ctx.set_value(f"part-{n}", Progress(i, 3))
        await ctx.set_value("last", n)

    @engine.workflow("parts")
    async def parts(ctx: WorkflowContext, data: Any) -> None:
        await asyncio.gather(part(ctx, 0), part(ctx, 1))
        await ctx.wait_for_event("again")  # a replay of both branches
        await ctx.set_value("after", True)

    async with engine:
        run_id = await engine.start("parts")
        await asyncio.sleep(0.2)
        await engine.send_event(run_id, "again")
        await engine.result(run_id, timeout=30)
        assert await engine.get_value(run_id, "part-1", returns=Progress) == Progress(2, 3)
        assert await engine.get_value(run_id, "last") in (0, 1)
        assert await engine.get_value(run_id, "after") is True
    # Each branch's writes count on their own; the replay wrote none of them again.
    assert len([a for a in asked if a[0] != "after"]) <= 8
    assert sum(1 for a in asked if a[0] == "after") == 1
    assert len({(key, repr(value)) for key, value, _ in asked}) == len(asked)


async def test_bad_keys_and_values_raise_and_store_nothing(engine: Engine) -> None:
    @engine.workflow("bad-values")
    async def bad_values(ctx: WorkflowContext, data: Any) -> list[str]:
        caught = []
        for key, value in (("", 1), (7, 1), ("k", object())):
            try:
                await ctx.set_value(key, value)  # type: ignore[arg-type]
            except (InvalidNameError, NotSerializableError) as exc:
                caught.append(f"{type(exc).__name__}: {exc}")
        return caught

    async with engine:
        run_id = await engine.start("bad-values")
        empty, not_str, not_json = await engine.result(run_id, timeout=30)
        assert empty.startswith("InvalidNameError: value key")
        assert not_str.startswith("InvalidNameError: value key must be a string")
        assert not_json.startswith("NotSerializableError") and "value 'k'" in not_json
        assert (await engine.status(run_id)).values == {}
        with pytest.raises(InvalidNameError, match="value key"):
            await engine.get_value(run_id, "")
        with pytest.raises(ValueError, match="value key"):
            await engine.get_value(run_id, None)  # type: ignore[arg-type]


async def test_a_bare_client_reads_values(store: Store) -> None:
    worker = Engine(store, lease_ttl="5s")
    client = Engine(store)  # registers nothing

    @worker.workflow("publisher")
    async def publisher(ctx: WorkflowContext, data: Any) -> None:
        await ctx.set_value("hello", "world")
        await ctx.wait_for_event("end")

    async with worker:
        run_id = await worker.start("publisher")
        assert await client.get_value(run_id, "hello", timeout=30) == "world"
        assert (await client.status(run_id)).values == {"hello": "world"}
        await worker.cancel(run_id)
