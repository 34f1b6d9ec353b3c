"""The Workers page: the live workers and the runs no live worker can drive."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine_core import Engine, WorkflowContext
from pikku_mongo.dashboard import dashboard_app
from tests.dashboard.conftest import client_for


async def test_the_workers_page_lists_workers_and_stranded_runs(
    make_engine: Callable[..., Engine],
) -> None:
    worker, stale, viewer = make_engine(), make_engine(), make_engine()

    @worker.workflow("served")
    async def served(ctx: WorkflowContext, data: Any) -> None:
        await ctx.wait_for_event("go")

    @worker.step_function("mailer")
    async def mailer(payload: Any) -> None:
        return None

    @stale.workflow("retired")
    async def retired(ctx: WorkflowContext, data: Any) -> None:
        return None

    # A run of a workflow that only a process now gone served.
    await stale.start("retired", run_id="left-behind")
    async with client_for(dashboard_app(viewer)) as client:
        async with worker:
            await worker.start("served", run_id="in-hand")
            page = await client.get("/workers")
            live = await client.get("/workers", headers={"HX-Request": "true"})
        after = await client.get("/workers")
    assert page.status_code == 200
    html = page.text
    assert f'data-worker="{worker.instance_id}"' in html
    assert "served" in html and "mailer" in html and "0 / 16" in html
    assert "No live worker can drive these runs" in html
    assert 'data-stranded="retired"' in html and 'data-stranded="served"' not in html
    assert 'id="workers-live"' in live.text and "<html" not in live.text
    assert 'href="/workers"' in html  # in the navigation
    # Once the worker stops, its runs are stranded too.
    assert "No live worker:" in after.text and 'data-stranded="served"' in after.text
