"""The Queues and Schedules pages and the schedule actions, through an ASGI client, on
both stores (the in-memory store and MongoStore on nx-27017)."""

from __future__ import annotations

import asyncio
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from markupsafe import escape

from engine_core import Engine, WorkflowContext
from engine_core.store import Store
from pikku_mongo.dashboard import dashboard_app
from tests.dashboard.conftest import client_for, csrf, csrf_of
from tests.support.dashboard_runs import QUEUE

ORIGIN = {"Origin": "http://127.0.0.1"}


def figures(page: str, queue: str) -> dict[str, str]:
    """The figures of ``queue``'s row on the queues page."""
    row = re.search(rf'<tr data-queue="{re.escape(queue)}">(.*?)</tr>', page, re.S)
    assert row, f"no row for queue {queue!r}"
    return dict(re.findall(r'<td data-figure="(\w+)">(\d+)</td>', row.group(1)))


async def test_nav_links_the_new_pages(client: httpx.AsyncClient) -> None:
    page = (await client.get("/runs")).text
    assert '<a href="/queues">Queues</a>' in page and '<a href="/schedules">Schedules</a>' in page
    queues = (await client.get("/queues")).text
    assert '<a href="/queues" aria-current="page">Queues</a>' in queues
    assert "No queue is declared here" in queues
    assert "No schedule is stored" in (await client.get("/schedules")).text


async def test_queues_page_limits_depth_and_link(
    seeded: dict[str, str], client: httpx.AsyncClient, store: Store
) -> None:
    page = await client.get("/queues")
    assert page.status_code == 200
    assert figures(page.text, QUEUE) == {
        "queued": "1",
        "active": "0",
        "admitted_last_minute": "0",
        "admitted_this_minute": "0",
    }
    row = page.text.split(f'<tr data-queue="{QUEUE}">')[1].split("</tr>")[0]
    # concurrency 2, per key 1, per worker none, rate 30 a minute
    cells = re.findall(r"<td>(.*?)</td>", row)
    assert cells == ["2", "1", '<span class="muted">none</span>', "30/60s"]
    assert (
        f'<a href="/runs?status=queued" title="The queued runs (of every queue)">{QUEUE}</a>' in row
    )
    listed = await client.get("/runs?status=queued")
    assert seeded["queued"] in listed.text and seeded["running"] not in listed.text
    # Live refresh: the section alone, polling itself.
    fragment = await client.get("/queues", headers={"HX-Request": "true"})
    assert fragment.text.lstrip().startswith('<section id="queues-live"')
    assert 'hx-get="/queues"' in fragment.text and "<html" not in fragment.text
    # A tool that declared nothing sees the queue and the limits stored by a serving
    # process that declared them.
    async with client_for(dashboard_app(Engine(store))) as bare:
        seen = (await bare.get("/queues")).text
    assert figures(seen, QUEUE)["queued"] == "1"
    bare_row = seen.split(f'<tr data-queue="{QUEUE}">')[1].split("</tr>")[0]
    assert re.findall(r"<td>(.*?)</td>", bare_row) == cells


async def test_queues_page_counts_active_and_admitted(engine: Engine) -> None:
    engine.queue("fast", concurrency=5)

    @engine.workflow("hold")
    async def hold(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("go")

    async with engine:
        run_id = await engine.start("hold", queue="fast")
        for _ in range(500):
            if (await engine.status(run_id)).status == "running":
                break
            await asyncio.sleep(0.01)
        async with client_for(dashboard_app(engine)) as client:
            shown = figures((await client.get("/queues")).text, "fast")
        await engine.cancel(run_id)
    assert shown["queued"] == "0" and shown["active"] == "1"
    # Admitted once, this minute (or the last one, when the minute turned meanwhile).
    assert int(shown["admitted_this_minute"]) + int(shown["admitted_last_minute"]) == 1


async def test_queues_page_shows_key_rate_fairness_and_the_keys_waiting(engine: Engine) -> None:
    engine.queue("fair", key_rate="10/1m", fairness="key")
    engine.queue("plain", concurrency=1)

    @engine.workflow("tenant")
    async def tenant(ctx: WorkflowContext, data: Any) -> Any:
        return data

    for n in range(3):
        await engine.start("tenant", n, queue="fair", key="busy")
    await engine.start("tenant", 9, queue="fair")
    await engine.start("tenant", 9, queue="plain", key="busy")
    async with client_for(dashboard_app(engine)) as client:
        page = (await client.get("/queues")).text
    assert (
        "<th>Key rate</th><th>Fairness</th>" in page and '<th rowspan="2">Keys waiting</th>' in page
    )
    fair = page.split('<tr data-queue="fair">')[1].split("</tr>")[0]
    assert '<td data-limit="key_rate">10/60s</td>' in fair
    assert '<td data-limit="fairness">key</td>' in fair
    assert '<td data-keys-waiting>2 <span class="muted">(busy: 3, no key: 1)</span></td>' in fair
    assert figures(page, "fair")["queued"] == "4"
    plain = page.split('<tr data-queue="plain">')[1].split("</tr>")[0]
    assert '<td data-limit="key_rate"><span class="muted">none</span></td>' in plain
    assert '<td data-limit="fairness"><span class="muted">first come</span></td>' in plain
    assert '<td data-keys-waiting><span class="muted">-</span></td>' in plain


async def test_runs_list_and_run_page_show_the_queue(
    seeded: dict[str, str], client: httpx.AsyncClient, engine: Engine
) -> None:
    listed = (await client.get("/runs")).text
    assert "<th>Queue</th>" in listed
    assert f'<span class="queue-name">{QUEUE}</span> <span class="muted">key eu</span>' in listed
    assert "priority 5" in listed
    # A page of runs none of which has a queue draws no queue column.
    assert "<th>Queue</th>" not in (await client.get("/runs?status=failed")).text
    page = (await client.get("/run", params={"id": seeded["queued"]})).text
    assert f'<dt>Queue</dt><dd><a href="/queues">{QUEUE}</a>' in page
    assert "<code>eu</code>" in page and "<dt>Deadline</dt>" in page
    assert 'data-action="cancel"' in page and 'data-action="suspend"' not in page
    token = await csrf(client)
    done = await client.post(
        "/run/action",
        data={"id": seeded["queued"], "action": "cancel", "csrf_token": token},
        headers=ORIGIN,
    )
    assert done.status_code == 303
    assert (await engine.status(seeded["queued"])).status == "cancelled"


async def test_a_delayed_run_shows_when_it_starts(engine: Engine) -> None:
    @engine.workflow("later")
    async def later(ctx: WorkflowContext, data: Any) -> Any:
        return None

    await engine.start("later", run_id="later-1", delay="2h")
    async with client_for(dashboard_app(engine)) as client:
        listed = (await client.get("/runs")).text
        page = (await client.get("/run", params={"id": "later-1"})).text
    assert "<th>Queue</th>" in listed
    assert re.search(r"delayed, starts in (1 h 59|2 h 0) min", listed)
    assert "<dt>Delayed until</dt>" in page and re.search(r"\(in (1 h 59|2 h 0) min\)", page)


# ---- schedules ----------------------------------------------------------------------

SCRIPT = {"note": "<script>window.pwned = 1</script>"}


@pytest.fixture
async def scheduled(engine: Engine) -> Engine:
    """A client engine with two schedules (one paused); nothing serves, nothing fires."""

    @engine.workflow("tick")
    async def tick(ctx: WorkflowContext, data: Any) -> Any:
        return data

    await engine.create_schedule(
        "nightly", "tick", cron="0 3 * * *", timezone="Europe/Helsinki", input=SCRIPT
    )
    await engine.create_schedule("often", "tick", every="90s")
    await engine.pause_schedule("often")
    return engine


def row_of(page: str, name: str) -> str:
    found = re.search(rf'<tr data-schedule="{re.escape(name)}">(.*?)</tr>', page, re.S)
    assert found, f"no row for schedule {name!r}"
    return found.group(1)


async def test_schedules_page(scheduled: Engine) -> None:
    engine = scheduled
    nightly = next(s for s in await engine.list_schedules() if s.name == "nightly")
    async with client_for(dashboard_app(engine)) as client:
        page = await client.get("/schedules")
    assert page.status_code == 200
    row = row_of(page.text, "nightly")
    assert '<a href="/runs?workflow=tick">tick</a>' in row
    assert "cron <code>0 3 * * *</code>" in row and "Europe/Helsinki" in row
    assert 'data-paused="no"' in row
    assert f"{nightly.next_fire_at:%Y-%m-%d %H:%M:%S} <span" in row and "(in " in row
    # The input is text: markup in it is escaped, never run.
    assert "<script>window.pwned" not in page.text
    assert str(escape('"<script>window.pwned = 1</script>"')) in row
    assert 'data-action="pause"' in row and 'data-action="delete"' in row
    assert 'data-action="resume"' not in row
    often = row_of(page.text, "often")
    assert "every 1 min 30 s" in often and 'data-paused="yes"' in often
    assert "none while paused" in often
    assert 'data-action="resume"' in often and 'data-action="pause"' not in often
    assert (await engine.list_schedules())[0].name == "nightly"


@pytest.mark.parametrize(
    ("name", "action", "paused"),
    [("nightly", "pause", True), ("often", "resume", False), ("often", "delete", None)],
)
async def test_schedule_actions_confirm_then_post(
    scheduled: Engine, name: str, action: str, paused: bool | None
) -> None:
    engine = scheduled
    async with client_for(dashboard_app(engine)) as client:
        confirm = await client.get("/schedules/confirm", params={"name": name, "action": action})
        assert confirm.status_code == 200
        assert 'method="post" action="/schedules/action"' in confirm.text
        assert f'<input type="hidden" name="name" value="{name}">' in confirm.text
        token = csrf_of(confirm.text)
        done = await client.post(
            "/schedules/action",
            data={"name": name, "action": action, "csrf_token": token},
            headers=ORIGIN,
        )
        assert done.status_code == 303, done.text
        location = done.headers["location"]
        assert urlsplit(location).path == "/schedules"
        assert parse_qs(urlsplit(location).query) == {"done": [action], "name": [name]}
        shown = await client.get(location)
        assert f"Schedule {name} {action}" in shown.text  # paused, resumed, deleted
    now = {s.name: s.paused for s in await engine.list_schedules()}
    assert now.get(name) == paused


async def test_schedule_actions_refused(scheduled: Engine) -> None:
    engine = scheduled
    async with client_for(dashboard_app(engine)) as client:
        token = await csrf(client, "/schedules")

        async def post(data: dict[str, str], **headers: str) -> httpx.Response:
            return await client.post("/schedules/action", data=data, headers={**ORIGIN, **headers})

        pause = {"name": "nightly", "action": "pause"}
        # CSRF: no token, a wrong one, a cross-site origin.
        assert (await post(pause)).status_code == 403
        assert (await post({**pause, "csrf_token": "f" * 64})).status_code == 403
        cross = await post({**pause, "csrf_token": token}, Origin="http://evil.example")
        assert cross.status_code == 403 and "cross-site" in cross.text
        # An action that does not apply, an unknown schedule, bad parameters.
        again = await post({"name": "often", "action": "pause", "csrf_token": token})
        assert again.status_code == 409 and "is paused" in again.text
        missing = await post({"name": "nope", "action": "delete", "csrf_token": token})
        assert missing.status_code == 404 and "no schedule is named" in missing.text
        confirm_missing = await client.get(
            "/schedules/confirm", params={"name": "nope", "action": "pause"}
        )
        assert confirm_missing.status_code == 404 and "Not found" in confirm_missing.text
        for params in ({"action": "pause"}, {"name": "nightly", "action": "explode"}):
            bad = await client.get("/schedules/confirm", params=params)
            assert bad.status_code == 400 and "Traceback" not in bad.text
        long_name = await client.get(
            "/schedules/confirm", params={"name": "n" * 501, "action": "pause"}
        )
        assert long_name.status_code == 400
        assert (await client.get("/schedules/action")).status_code == 405
        # A notice is shown only when it holds: nightly is not paused.
        spoof = await client.get("/schedules", params={"done": "pause", "name": "nightly"})
        assert "Schedule nightly paused." not in spoof.text
    assert {s.name: s.paused for s in await engine.list_schedules()} == {
        "nightly": False,
        "often": True,
    }


async def test_read_only_refuses_schedule_actions(scheduled: Engine) -> None:
    engine = scheduled
    async with client_for(dashboard_app(engine, read_only=True)) as client:
        page = await client.get("/schedules")
        assert page.status_code == 200 and "data-action=" not in page.text
        assert "read-only" in page.text
        confirm = await client.get(
            "/schedules/confirm", params={"name": "nightly", "action": "pause"}
        )
        assert confirm.status_code == 403
        post = await client.post(
            "/schedules/action",
            data={"name": "nightly", "action": "delete", "csrf_token": csrf_of(page.text)},
            headers=ORIGIN,
        )
        assert post.status_code == 403 and "read-only" in post.text
    assert len(await engine.list_schedules()) == 2


async def test_schedules_need_access_like_every_page(scheduled: Engine) -> None:
    app = dashboard_app(scheduled, token="s3cret-token-for-tests")
    async with client_for(app) as client:
        assert (await client.get("/schedules")).status_code == 303
        assert (await client.get("/queues", headers={"HX-Request": "true"})).status_code == 401
        denied = await client.post(
            "/schedules/action", data={"name": "nightly", "action": "delete"}
        )
        assert denied.status_code in (401, 403)
    async with client_for(dashboard_app(scheduled), client=("10.9.8.7", 1)) as remote:
        assert (await remote.get("/schedules")).status_code == 403
    assert len(await scheduled.list_schedules()) == 2
