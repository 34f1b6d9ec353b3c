"""``@engine.workflow(name, version=...)`` and ``Engine(pin_versions=True)``
(docs/guides/changing-code.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from engine_core import Engine, WorkflowContext
from engine_core.errors import InvalidNameError
from engine_core.store import Store


async def test_the_version_is_stored_on_runs_shown_and_filterable(engine: Engine) -> None:
    @engine.workflow("order", version="2026-12")
    async def order(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.child("ship", "shipping", data)

    @engine.workflow("shipping")
    async def shipping(ctx: WorkflowContext, data: Any) -> Any:
        return "shipped"

    async with engine:
        run_id = await engine.start("order", 1, run_id="o-1")
        assert await engine.result(run_id, timeout=10) == "shipped"
        status = await engine.status(run_id)
        assert status.version == "2026-12"
        children = [r for r in await engine.list_runs() if r.parent_run_id == run_id]
        assert [c.version for c in children] == [None]
        assert [r.run_id for r in await engine.list_runs(version="2026-12")] == ["o-1"]
        assert await engine.list_runs(version="2027-01") == []


def test_a_bad_version_label_is_refused(engine: Engine) -> None:
    with pytest.raises(InvalidNameError):
        engine.workflow("w", version="")


async def test_pinned_engines_drive_only_the_versions_they_register(
    store: Store, make_engine: Callable[..., Engine]
) -> None:
    old, new = make_engine(pin_versions=True), make_engine(pin_versions=True)
    loose = make_engine()

    @old.workflow("w", version="1")
    async def w1(ctx: WorkflowContext, data: Any) -> str:
        return await ctx.step("s", lambda: "v1")

    @new.workflow("w", version="2")
    async def w2(ctx: WorkflowContext, data: Any) -> str:
        return await ctx.step("s", lambda: "v2")

    @loose.workflow("w")
    async def w0(ctx: WorkflowContext, data: Any) -> str:
        return await ctx.step("s", lambda: "any")

    first = await old.start("w", run_id="r1")
    second = await new.start("w", run_id="r2")
    for engine in (new, old):
        await engine.drive(first)
        await engine.drive(second)
    assert (await old.status(first)).output == "v1"
    assert (await new.status(second)).output == "v2"
    assert (await old.status(second)).version == "2"
    # Left to a process that has the version: an unpinned one drives any.
    third = await new.start("w", run_id="r3")
    await old.drive(third)
    assert (await old.status(third)).status == "running"
    await loose.drive(third)
    assert (await old.status(third)).output == "any"
