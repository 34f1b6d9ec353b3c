"""Every page and every action of the dashboard, through an ASGI client, on both stores
(the in-memory store and MongoStore on nx-27017)."""

from __future__ import annotations

import html
import re
from typing import Any
from urllib.parse import parse_qs, quote_plus, urlsplit

import httpx
import pytest
from markupsafe import escape

from engine_core import Engine, WorkflowContext
from pikku_mongo.dashboard.params import RUN_STATUSES
from tests.dashboard.conftest import csrf
from tests.support.dashboard_runs import WEIRD_ID


def run_href(run_id: str) -> str:
    return str(escape(f"/run?id={quote_plus(run_id)}"))


def listed_ids(page: str) -> list[str]:
    """The run ids in the list's first column, in order."""
    rows = re.findall(r'<tr>\s*<td><a class="run-id" href="/run\?id=([^"]+)">', page)
    return [parse_qs(f"id={html.unescape(r)}")["id"][0] for r in rows]


async def test_runs_page_counts_by_status_and_links_every_run(
    seeded: dict[str, str], client: httpx.AsyncClient
) -> None:
    page = await client.get("/runs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    for status in RUN_STATUSES:
        expected = {"running": 2, "completed": 2}.get(status, 1)
        assert f'data-count="{status}">{expected}<' in page.text, status
    assert "all <strong>11</strong>" in page.text
    for run_id in seeded.values():
        assert run_href(run_id) in page.text, run_id
    assert sorted(listed_ids(page.text)) == sorted(seeded.values())  # newest first
    # The workflow filter offers the names in the store.
    for name in ("shop", "ship", "fails", "refunds", "refunds-badly", "waits"):
        assert f'<option value="{name}">{name}</option>' in page.text
    # Runs are linked from the list to their page, whatever their ids hold.
    assert "<b>id</b>" not in page.text and str(escape(WEIRD_ID)) in page.text
    assert (await client.get("/")).headers["location"] == "/runs"


async def test_runs_filters(seeded: dict[str, str], client: httpx.AsyncClient) -> None:
    async def ids(**params: str) -> list[str]:
        page = await client.get("/runs", params=params)
        assert page.status_code == 200, page.text
        return listed_ids(page.text)

    assert await ids(status="failed") == ["order-failed"]
    waits = [
        seeded[k] for k in ("cancelled", "compensating", "queued", "running", "suspended", "weird")
    ]
    assert sorted(await ids(workflow="waits")) == sorted(waits)
    assert sorted(await ids(workflow="waits", status="running")) == sorted(
        [seeded["running"], seeded["weird"]]
    )
    compe = ["order-compensated", "order-compensating", "order-compensation-failed"]
    assert sorted(await ids(prefix="order-compe")) == compe
    assert await ids(prefix="weird/<b>") == [WEIRD_ID]
    assert await ids(prefix=".*") == []
    assert await ids(before="2000-01-01T00:00") == []
    assert len(await ids(since="2000-01-01T00:00:00", before="2999-01-01T00:00")) == 11
    counted = (await client.get("/runs", params={"workflow": "waits"})).text
    assert "all <strong>6</strong>" in counted and 'data-count="running">2<' in counted
    # A workflow the store does not know is still offered, selected.
    unknown = (await client.get("/runs", params={"workflow": "nope"})).text
    assert '<option value="nope" selected>nope</option>' in unknown
    assert "No run matches" in unknown


@pytest.mark.parametrize("order", ["newest", "oldest", "id"])
async def test_keyset_pages_walk_every_run_once(
    seeded: dict[str, str], client: httpx.AsyncClient, engine: Engine, order: str
) -> None:
    seen: list[str] = []
    url = "/runs?limit=3" + ("" if order == "newest" else f"&order={order}")
    for _ in range(10):
        page = await client.get(url)
        seen += listed_ids(page.text)
        found = re.search(r'<a rel="next" href="([^"]+)">', page.text)
        if not found:
            break
        url = html.unescape(found.group(1))
        assert "after=" in url and "limit=3" in url
        assert (f"order={order}" in url) == (order != "newest")
    assert sorted(seen) == sorted(seeded.values())
    assert seen == [r.run_id for r in await engine.list_runs(limit=100, order=order)]
    if order == "newest":  # the default: the most recently created run comes first
        created = [(await engine.status(r)).created_at for r in seen]
        assert created == sorted(created, reverse=True)
    assert "order must be one of" in (await client.get("/runs?order=sideways")).text


async def test_live_refresh_gets_the_live_section_only(
    seeded: dict[str, str], client: httpx.AsyncClient
) -> None:
    fragment = await client.get("/runs?status=running", headers={"HX-Request": "true"})
    assert fragment.status_code == 200
    assert fragment.text.lstrip().startswith('<section id="runs-live"')
    assert "<html" not in fragment.text and 'hx-trigger="every 5.0s"' in fragment.text
    assert 'hx-get="/runs?status=running"' in fragment.text
    assert sorted(listed_ids(fragment.text)) == sorted([seeded["running"], seeded["weird"]])
    run = await client.get("/run", params={"id": seeded["running"]}, headers={"HX-Request": "true"})
    assert run.text.lstrip().startswith('<section id="run-live"') and "hx-trigger" in run.text
    ended = await client.get(
        "/run", params={"id": seeded["completed"]}, headers={"HX-Request": "true"}
    )
    assert "hx-trigger" not in ended.text  # nothing left to refresh


async def test_run_page_values_family_steps_timeline_and_trace(
    seeded: dict[str, str], client: httpx.AsyncClient, engine: Engine
) -> None:
    page = (await client.get("/run", params={"id": seeded["completed"]})).text
    status = await engine.status(seeded["completed"])
    assert status.trace_id and f'<code class="trace-id">{status.trace_id}</code>' in page
    assert str(escape('"amount": 42')) in page  # pretty JSON, as text
    assert str(escape('"paid": {\n    "charged": 42\n  }')) in page
    assert run_href(seeded["child"]) in page  # the child, linked
    for step in ("reserve", "charge", "cool-off", "approval", "ship"):
        assert f'<td class="step-name">{step}</td>' in page
    bars = re.findall(r'<rect class="bar (attempt|wait) (\w+)"', page)
    assert ("attempt", "failed") in bars and ("attempt", "succeeded") in bars
    assert ("wait", "succeeded") in bars  # the sleep and the event wait
    assert "charge, attempt 1: failed after" in page and "ConnectionError: gateway timeout" in page
    assert 'href="#attempt-2"' in page and 'id="attempt-2"' in page
    assert "Cancel" not in page.split("<h2>Input</h2>")[0]  # a completed run has no actions
    child = (await client.get("/run", params={"id": seeded["child"]})).text
    assert run_href(seeded["completed"]) in child and "(step ship)" in child
    failed = (await client.get("/run", params={"id": seeded["failed"]})).text
    assert "ValueError: card declined" in failed and 'data-action="retry"' in failed
    running = (await client.get("/run", params={"id": seeded["running"]})).text
    for action in ("cancel", "cancel-compensate", "suspend"):
        assert f'data-action="{action}"' in running
    assert 'rect class="bar wait waiting"' in running  # still waiting for its event


async def test_values_are_text_and_long_values_fold(
    seeded: dict[str, str], client: httpx.AsyncClient
) -> None:
    page = await client.get("/run", params={"id": WEIRD_ID})
    assert page.status_code == 200
    assert "<script>window.pwned" not in page.text
    assert "&lt;script&gt;window.pwned = 1&lt;/script&gt;" in page.text
    assert '<details class="value">' in page.text  # 40 list items: folded
    assert "<b>id</b>" not in page.text


@pytest.mark.parametrize(
    ("key", "action", "after"),
    [
        ("running", "cancel", "cancelled"),
        ("running", "suspend", "suspended"),
        ("suspended", "resume", "running"),
        ("suspended", "cancel-compensate", "compensating"),
        ("failed", "retry", "running"),
    ],
)
async def test_actions_confirm_then_post(
    seeded: dict[str, str],
    client: httpx.AsyncClient,
    engine: Engine,
    key: str,
    action: str,
    after: str,
) -> None:
    run_id = seeded[key]
    confirm = await client.get("/run/confirm", params={"id": run_id, "action": action})
    assert confirm.status_code == 200 and 'method="post" action="/run/action"' in confirm.text
    token = await csrf(client)
    done = await client.post(
        "/run/action",
        data={"id": run_id, "action": action, "csrf_token": token},
        headers={"Origin": "http://127.0.0.1"},
    )
    assert done.status_code == 303, done.text
    location = done.headers["location"]
    assert urlsplit(location).path == "/run"
    assert parse_qs(urlsplit(location).query) == {"id": [run_id], "done": [action]}
    assert (await engine.status(run_id)).status == after
    shown = await client.get(location)
    assert f"The run is now {after}." in shown.text


async def test_actions_that_do_not_apply_and_missing_runs(
    seeded: dict[str, str], client: httpx.AsyncClient
) -> None:
    token = await csrf(client)
    refused = await client.post(
        "/run/action", data={"id": seeded["completed"], "action": "cancel", "csrf_token": token}
    )
    assert refused.status_code == 409 and "is completed" in refused.text
    page = await client.get("/run/confirm", params={"id": seeded["completed"], "action": "retry"})
    assert page.status_code == 409
    missing = await client.get("/run", params={"id": "no-such-run"})
    assert missing.status_code == 404 and "no run has id" in missing.text


@pytest.mark.parametrize(
    "query",
    [
        "status=bogus",
        "status=running&status=failed",
        "limit=0",
        "limit=201",
        "limit=ten",
        "prefix=" + "x" * 201,
        "since=yesterday",
        "before=2026-13-01T00:00",
        "workflow=" + "w" * 501,
        "workflow=a%00b",
    ],
)
async def test_bad_list_parameters_get_a_400_page(client: httpx.AsyncClient, query: str) -> None:
    page = await client.get(f"/runs?{query}")
    assert page.status_code == 400
    assert "Bad request" in page.text and "Traceback" not in page.text


@pytest.mark.parametrize(
    "query", ["", "id=", "id=" + "r" * 201, "id=a&id=b", "id=x&action=explode", "id=x"]
)
async def test_bad_run_parameters_get_a_400_page(client: httpx.AsyncClient, query: str) -> None:
    path = "/run/confirm" if "action" in query or query == "id=x" else "/run"
    page = await client.get(f"{path}?{query}")
    assert page.status_code == 400, (path, query)
    assert "Traceback" not in page.text


async def test_unknown_pages_and_methods(client: httpx.AsyncClient) -> None:
    missing = await client.get("/nothing-here")
    assert missing.status_code == 404 and "Not found" in missing.text
    wrong = await client.get("/run/action")
    assert wrong.status_code == 405


async def test_any_run_id_links_to_its_page(engine: Engine, client: httpx.AsyncClient) -> None:
    @engine.workflow("w")
    async def w(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("never")

    awkward = ["a\x00b", "..", ".", "x/../y", "%2F", "+ plus", "#", "?&=", "é😀", "<i>", "$ne"]
    for run_id in awkward:
        await engine.start("w", run_id=run_id)
    page = (await client.get("/runs")).text
    assert sorted(listed_ids(page)) == sorted(awkward)
    for href in re.findall(r'<td><a class="run-id" href="([^"]+)">', page):
        run_page = await client.get(html.unescape(href))
        assert run_page.status_code == 200, href
        run_id = parse_qs(urlsplit(html.unescape(href)).query)["id"][0]
        assert f'<span class="run-id">{escape(run_id)}</span>' in run_page.text
    nul = await client.get("/runs", params={"prefix": "a\x00"})
    assert listed_ids(nul.text) == ["a\x00b"]
