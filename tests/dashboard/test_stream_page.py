"""The run page tails the run's streams: the last entries of each, in the live section
that refreshes while the run is active."""

from __future__ import annotations

from typing import Any

import httpx

from engine_core import Engine, WorkflowContext, current_step


def _register(engine: Engine) -> None:
    async def speak() -> None:
        info = current_step()
        assert info is not None
        await info.write_stream("tokens", "<b>hi</b>")

    @engine.workflow("streams-page")
    async def streams_page(ctx: WorkflowContext, data: Any) -> None:
        for i in range(60):
            await ctx.write_stream("progress", {"done": i})
        await ctx.step("speak", speak)
        await ctx.wait_for_event("go")
        await ctx.write_stream("progress", {"done": 60})
        await ctx.close_stream("progress")
        await ctx.wait_for_event("end")


async def test_the_run_page_tails_each_stream_live(
    engine: Engine, client: httpx.AsyncClient
) -> None:
    _register(engine)
    async with engine:
        run_id = await engine.start("streams-page")
        async for entry in engine.read_stream(run_id, "tokens", timeout=30):
            assert entry.value == "<b>hi</b>"
            break
        page = (await client.get("/run", params={"id": run_id})).text
        assert '<section class="stream" data-stream="progress">' in page
        assert "60 entries, live; the last 50 shown" in page
        assert '<li value="59">' in page and '<li value="9">' not in page
        assert "{&#34;done&#34;: 59}" in page or '{"done": 59}' in page.replace("&#34;", '"')
        assert "speak attempt 1 #0" in page
        assert "&lt;b&gt;hi&lt;/b&gt;" in page and "<b>hi</b>" not in page  # text, not markup
        await engine.send_event(run_id, "go", None)
        async for _ in engine.read_stream(run_id, "progress", offset=60, timeout=30):
            pass  # until the close
        live = await client.get("/run", params={"id": run_id}, headers={"HX-Request": "true"})
        assert live.text.startswith('<section id="run-live"')
        assert '<li value="60">' in live.text and "61 entries, closed" in live.text
        await engine.cancel(run_id)
