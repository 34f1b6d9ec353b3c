"""``ctx.patched`` / ``ctx.deprecate_patch`` (docs/guides/changing-code.md): one body
serves runs begun on old code and new ones."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from engine_core import Engine, EngineError, WorkflowContext
from engine_core.errors import InvalidNameError
from tests.test_divergence import _parked


class Shop:
    def __init__(self) -> None:
        self.ran: list[str] = []

    def ship(self) -> str:
        self.ran.append("ship")
        return "shipped"

    def charge(self) -> str:
        self.ran.append("charge")
        return "charged"


def _order(engine: Engine, shop: Shop, code: dict[str, int]) -> None:
    @engine.workflow("order")
    async def order(ctx: WorkflowContext, data: Any) -> list[Any]:
        out: list[Any] = []
        await ctx.wait_for_event("begin")
        if code["v"] == 1:
            out.append(await ctx.step("charge", shop.charge))
        elif code["v"] == 2:
            if await ctx.patched("ship-first"):
                out.append(await ctx.step("ship", shop.ship))
            out.append(await ctx.step("charge", shop.charge))
        else:
            ctx.deprecate_patch("ship-first")
            out.append(await ctx.step("ship", shop.ship))
            out.append(await ctx.step("charge", shop.charge))
        await ctx.wait_for_event("end")
        again = await ctx.patched("ship-first") if code["v"] == 2 else None
        return [*out, again]


async def test_new_runs_take_the_patch_and_keep_it_on_every_replay(engine: Engine) -> None:
    shop, code = Shop(), {"v": 2}
    _order(engine, shop, code)
    async with engine:
        run_id = await engine.start("order")
        await engine.send_event(run_id, "begin", None)
        await _parked(engine, run_id, "end")
        st = await engine.status(run_id)
        # The marker is shown apart, as a patch the run took, never as a step.
        assert st.patches == ["ship-first"]
        assert list(st.steps) == ["begin", "ship", "charge", "end"]
        await engine.send_event(run_id, "end", None)
        assert await engine.result(run_id, timeout=10) == ["shipped", "charged", True]
        assert shop.ran == ["ship", "charge"]


async def test_a_run_past_the_patch_point_on_old_code_keeps_the_old_path(
    engine: Engine,
) -> None:
    shop, code = Shop(), {"v": 1}
    _order(engine, shop, code)
    async with engine:
        run_id = await engine.start("order")
        await engine.send_event(run_id, "begin", None)
        await _parked(engine, run_id, "end")
        code["v"] = 2  # the patched deploy
        await engine.send_event(run_id, "end", None)
        # The run had charged: patched() is False (and stays False later in the pass).
        assert await engine.result(run_id, timeout=10) == ["charged", False]
        assert shop.ran == ["charge"]
        assert (await engine.status(run_id)).patches == []


async def test_a_run_that_had_not_reached_the_patch_point_takes_it(engine: Engine) -> None:
    shop, code = Shop(), {"v": 1}
    _order(engine, shop, code)
    async with engine:
        run_id = await engine.start("order")
        await _parked(engine, run_id, "begin")
        code["v"] = 2
        await engine.send_event(run_id, "begin", None)
        await _parked(engine, run_id, "end")
        await engine.send_event(run_id, "end", None)
        assert await engine.result(run_id, timeout=10) == ["shipped", "charged", True]


async def test_deprecate_patch_accepts_runs_with_or_without_the_marker(engine: Engine) -> None:
    shop, code = Shop(), {"v": 1}
    _order(engine, shop, code)
    async with engine:
        unmarked = await engine.start("order")  # begun on old code, before the point
        await _parked(engine, unmarked, "begin")
        code["v"] = 2
        marked = await engine.start("order")
        await engine.send_event(marked, "begin", None)
        await _parked(engine, marked, "end")
        code["v"] = 3  # no run stands past the point on old code: the patch is deprecated
        await engine.send_event(unmarked, "begin", None)
        for run_id in (marked, unmarked):
            await _parked(engine, run_id, "end")
            await engine.send_event(run_id, "end", None)
            assert await engine.result(run_id, timeout=10) == ["shipped", "charged", None]


@pytest.mark.parametrize("bad", ["", 7, None, "a\x00b"])
async def test_a_bad_patch_id_raises_at_the_call(engine: Engine, bad: Any) -> None:
    @engine.workflow("bad")
    async def bad_patch(ctx: WorkflowContext, data: Any) -> list[str]:
        caught = []
        for call in (ctx.patched, ctx.deprecate_patch):
            try:
                out = call(bad)
                if asyncio.iscoroutine(out):
                    await out
            except InvalidNameError as exc:
                assert isinstance(exc, ValueError) and isinstance(exc, EngineError)
                caught.append(type(exc).__name__)
        return caught

    async with engine:
        run_id = await engine.start("bad")
        assert await engine.result(run_id, timeout=10) == ["InvalidNameError"] * 2
