"""Names cannot collide: loop ordinals, compensation keys and child run ids are
unambiguous whatever characters a name holds; runs stored with the old naming still
replay."""

from __future__ import annotations

from typing import Any

from engine_core import Engine, WorkflowContext
from engine_core.common.clock import utcnow
from engine_core.records import RunRecord, StepRecord


async def test_a_step_named_like_an_ordinal_is_its_own_step(engine: Engine) -> None:
    ran: list[str] = []

    def make(tag: str) -> Any:
        def step() -> str:
            ran.append(tag)
            return tag

        return step

    @engine.workflow("w")
    async def w(ctx: WorkflowContext, data: Any) -> list[str]:
        first = await ctx.step("item#1", make("named item#1"))
        loop = [await ctx.step("item", make(f"item {i}")) for i in range(2)]
        return [first, *loop]

    async with engine:
        run_id = await engine.start("w")
        assert await engine.result(run_id, timeout=10) == ["named item#1", "item 0", "item 1"]
    assert ran == ["named item#1", "item 0", "item 1"]
    assert len((await engine.status(run_id)).steps) == 3


async def test_a_step_named_like_a_compensation_is_its_own_step(engine: Engine) -> None:
    undone: list[Any] = []

    @engine.workflow("w")
    async def w(ctx: WorkflowContext, data: Any) -> None:
        await ctx.step("compensate:a", lambda: "plain")
        await ctx.step("a", lambda: "a", compensate=lambda r: undone.append(r))
        raise RuntimeError("fail after a")

    async with engine:
        run_id = await engine.start("w")
        try:
            await engine.result(run_id, timeout=10)
        except Exception:
            pass
    status = await engine.status(run_id)
    assert status.status == "compensated" and undone == ["a"]
    assert status.steps["compensate\\:a"].result == "plain"
    assert status.steps["compensate:a"].status == "succeeded"  # the compensation


async def test_child_run_ids_never_collide(engine: Engine) -> None:
    @engine.workflow("child")
    async def child(ctx: WorkflowContext, data: Any) -> Any:
        return data

    @engine.workflow("parent")
    async def parent(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.child(data["step"], "child", data)

    async with engine:
        one = await engine.start("parent", {"step": "c"}, run_id="a:b")
        two = await engine.start("parent", {"step": "b:c"}, run_id="a")
        assert await engine.result(one, timeout=10) == {"step": "c"}
        assert await engine.result(two, timeout=10) == {"step": "b:c"}
    children = {c.run_id for p in ("a:b", "a") for c in await engine.list_children(p)}
    assert len(children) == 2


async def test_a_run_stored_with_the_old_names_still_replays(engine: Engine) -> None:
    ran: list[int] = []

    @engine.workflow("loop")
    async def loop(ctx: WorkflowContext, data: Any) -> list[Any]:
        return [await ctx.step("item", lambda i=i: ran.append(i) or i) for i in range(3)]

    now = utcnow()
    # Written by 0.1: the second and third "item" are "item#1" and "item#2".
    await engine.store.insert_run(RunRecord(
        run_id="old", workflow="loop", status="running", input=None,
        created_at=now, updated_at=now, passes=1, token=1, key_scheme=1,
    ))  # fmt: skip
    for n, key in enumerate(["item", "item#1"]):
        await engine.store.save_steps([StepRecord(
            run_id="old", key=key, kind="inline", status="succeeded", attempts=1,
            result=n * 10, updated_at=now, ended_at=now,
        )])  # fmt: skip
    await engine.store.request_pass("old")
    async with engine:
        assert await engine.result("old", timeout=10) == [0, 10, 2]
    assert ran == [2]  # only the step never recorded ran
