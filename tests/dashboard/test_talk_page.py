"""The run page lists the values the run published and the updates it has not answered
(docs/guides/values-and-updates.md)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from engine_core import Engine, WorkflowContext


async def test_the_run_page_lists_values_and_pending_updates(
    engine: Engine, client: httpx.AsyncClient
) -> None:
    @engine.workflow("talk-page")
    async def talk_page(ctx: WorkflowContext, data: Any) -> None:
        await ctx.set_value("stage", "<i>packing</i>")
        await ctx.set_value("stage", "<i>shipping</i>")
        await ctx.set_value("eta", {"days": 3})
        await ctx.wait_for_event("go")  # answers no update

    async with engine:
        run_id = await engine.start("talk-page")
        assert await engine.get_value(run_id, "eta", timeout=30) == {"days": 3}
        with pytest.raises(TimeoutError):
            await engine.update(run_id, "hold", {"why": "audit"}, update_id="h-1", timeout=0.3)
        page = (await client.get("/run", params={"id": run_id})).text
        assert "<h2>Published values</h2>" in page
        assert "&lt;i&gt;shipping&lt;/i&gt;" in page and "packing" not in page  # latest, as text
        assert "<code>eta</code>" in page
        assert "<h2>Pending updates</h2>" in page
        assert "<code>h-1</code>" in page and "waiting for the run" in page
        await engine.cancel(run_id)
        ended = (await client.get("/run", params={"id": run_id})).text
        assert "<h2>Published values</h2>" in ended
