"""The dashboard where the tier, the fleet and the operator meet: a run no live worker
will drive says so under "Why it waits"; the fork's confirm page lists what it copies
and what runs again; patches are shown apart from steps; sending an event asks in place
like every other action, and its confirm page reads right; a wait's bar and tooltip say
what it is; and an outage is a 503 page, not a 400."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine_core import Engine, StoreUnavailableError, WorkflowContext, WorkflowRunFailedError
from pikku_mongo.dashboard import dashboard_app
from tests.dashboard.conftest import client_for
from tests.support.waiting import reaches

CSS = Path(__file__).resolve().parents[2] / "pikku_mongo/dashboard/static/dashboard.css"


def register_shop(engine: Engine, version: str | None = None) -> None:
    def charge() -> str:
        return "ch-1"

    def refund(charge_id: str) -> None:
        return None

    def pack() -> str:
        raise RuntimeError("no boxes")

    @engine.workflow("shop", version=version)
    async def shop(ctx: WorkflowContext, data: Any) -> str:
        if await ctx.patched("rename-charge"):
            await ctx.step("charge", charge, compensate=refund)
        await ctx.sleep("cool-off", "10ms")
        if data == "wait":
            await ctx.wait_for_event("approval")
        await ctx.step("pack", pack)
        return "shipped"


async def test_why_it_waits_names_a_run_no_live_worker_will_drive(
    make_engine: Callable[..., Engine],
) -> None:
    worker, old_tier, viewer = make_engine(pin_versions=True), make_engine(), make_engine()
    register_shop(worker, "v2")
    register_shop(old_tier)  # an older tier with the code and no version
    async with client_for(dashboard_app(viewer)) as client, worker:
        run_id = await old_tier.start("shop", "wait", run_id="stuck")
        page = await client.get("/run", params={"id": run_id})
        workers = await client.get("/workers")
    assert page.status_code == 200
    assert "Why it waits" in page.text
    assert "No live worker will drive it: no live worker drives no version of workflow" in (
        page.text.replace("&#39;", "'")
    )
    assert 'data-stranded="shop"' in workers.text and "(pinned)" in workers.text


def fork_plan(html: str) -> dict[str, str]:
    """The fork plan a confirm page lists, fact by fact."""
    return dict(re.findall(r'<dt>([^<]+)</dt><dd class="fork-plan">([^<]*)</dd>', html))


async def test_fork_confirm_lists_copied_and_run_again_and_patches_stand_apart(
    engine: Engine,
) -> None:
    register_shop(engine)
    async with client_for(dashboard_app(engine)) as client, engine:
        with pytest.raises(WorkflowRunFailedError):
            await engine.result(await engine.start("shop", "go", run_id="refunded"), timeout=10)
        page = await client.get("/run", params={"id": "refunded"})
        fork = {"id": "refunded", "action": "fork"}
        confirm = await client.get("/run/confirm", params=fork)
        here = await client.get("/run/confirm", params={**fork, "step": "cool-off"})
    assert "patched:" not in page.text
    assert re.search(r"<dt>Patches</dt><dd[^>]*><code>rename-charge</code>", page.text)
    assert confirm.status_code == 200
    assert fork_plan(confirm.text) == {
        "Runs anew from step": "pack",
        "Copied (not run again)": "cool-off",
        "Run again": "charge (its compensation ran), pack",
    }
    assert fork_plan(here.text)["Copied (not run again)"] == "none"


async def test_send_event_asks_in_place_and_its_confirm_page_reads_right(
    engine: Engine,
) -> None:
    register_shop(engine)
    async with client_for(dashboard_app(engine)) as client, engine:
        run_id = await engine.start("shop", "wait", run_id="waiting")
        await reaches(engine, run_id, "approval")
        page = await client.get("/run", params={"id": run_id})
        confirm = await client.get(
            "/run/confirm",
            params={"id": run_id, "action": "send-event", "event": "approval", "payload": "1"},
        )
    form = re.search(r'<form class="send-event"[^>]*>', page.text)
    assert form is not None
    assert 'data-confirm="Send event approval to run waiting?' in form.group(0)
    assert 'data-post="/run/action"' in form.group(0)
    assert "<h1>Send event &#39;approval&#39; to this run?</h1>" in confirm.text
    assert "Send event this run?" not in confirm.text
    # The bar of the sleep that ended is not drawn like a stopped or lost attempt, and
    # the wait going on now says so.
    assert 'class="bar wait succeeded"' in page.text
    assert re.search(r"approval: waiting, [^<]* so far</title>", page.text)
    assert "then waiting" not in page.text
    css = CSS.read_text()
    wait = re.search(r"rect\.wait \{ fill: (#[0-9a-f]+); \}", css)
    stopped = re.search(
        r"rect\.attempt\.stopped, rect\.attempt\.lost \{ fill: (#[0-9a-f]+); \}", css
    )
    assert wait is not None and stopped is not None and wait.group(1) != stopped.group(1)


async def test_an_outage_is_a_503_page_saying_the_database_cannot_be_reached(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def away(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailableError("the MongoDB server is unavailable: connection refused")

    for name in ("list_runs", "count_runs", "get_run", "list_workflows"):
        monkeypatch.setattr(engine.store, name, away)
    fast = Engine(engine.store, store_timeout="300ms")  # a mounted dashboard's engine
    async with client_for(dashboard_app(fast)) as client:
        listed = await client.get("/runs")
        one = await client.get("/run", params={"id": "x"})
    for page in (listed, one):
        assert page.status_code == 503, page.text
        assert "Database unavailable" in page.text and "cannot be reached" in page.text
