"""The dashboard shows a run's ``version=`` label and filters the list by it, and shows a
divergent run's error (docs/guides/changing-code.md)."""

from __future__ import annotations

from typing import Any

import httpx

from engine_core import Engine, WorkflowContext


async def test_versions_are_shown_and_filter_the_list(
    engine: Engine, client: httpx.AsyncClient
) -> None:
    @engine.workflow("labelled", version="2026-12")
    async def labelled(ctx: WorkflowContext, data: Any) -> str:
        return "ok"

    @engine.workflow("plain")
    async def plain(ctx: WorkflowContext, data: Any) -> str:
        return "ok"

    await engine.start("labelled", run_id="with-version")
    await engine.start("plain", run_id="without-version")
    listed = await client.get("/runs")
    assert listed.status_code == 200
    assert "<th>Version</th>" in listed.text and "2026-12" in listed.text
    only = await client.get("/runs", params={"version": "2026-12"})
    assert "with-version" in only.text and "without-version" not in only.text
    page = await client.get("/run", params={"id": "with-version"})
    assert '<dd class="version">2026-12</dd>' in page.text
