"""Issue 24 on the dashboard: a schedule's "Run now", the interval text, why a run
waits, and the "send event" action."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import parse_qs, urlsplit

from engine_core import Engine, WorkflowContext
from pikku_mongo.dashboard import dashboard_app
from tests.dashboard.conftest import client_for, csrf_of

ORIGIN = {"Origin": "http://127.0.0.1"}


async def test_run_now_starts_one_run_of_a_paused_schedule(engine: Engine) -> None:
    @engine.workflow("tick")
    async def tick(ctx: WorkflowContext, data: Any) -> Any:
        return data

    await engine.create_schedule("often", "tick", every="30s", input={"n": 1})
    await engine.pause_schedule("often")
    async with client_for(dashboard_app(engine)) as client:
        listing = (await client.get("/schedules")).text
        assert 'data-action="trigger"' in listing
        assert "every 30 s" in listing and "30.00" not in listing
        confirm = await client.get(
            "/schedules/confirm", params={"name": "often", "action": "trigger"}
        )
        assert confirm.status_code == 200 and "Run now" in confirm.text
        done = await client.post(
            "/schedules/action",
            data={"name": "often", "action": "trigger", "csrf_token": csrf_of(confirm.text)},
            headers=ORIGIN,
        )
        assert done.status_code == 303, done.text
        location = urlsplit(done.headers["location"])
        run_id = parse_qs(location.query)["id"][0]
        assert location.path == "/run" and run_id.startswith("often@manual-")
    assert (await engine.status(run_id)).input == {"n": 1}
    [schedule] = await engine.list_schedules()
    assert schedule.paused
    async with client_for(dashboard_app(engine, read_only=True)) as client:
        assert 'data-action="trigger"' not in (await client.get("/schedules")).text


async def approval(ctx: WorkflowContext, data: Any) -> Any:
    await ctx.step("a-step-with-a-rather-long-name", lambda: 1)
    return await ctx.wait_for_event("approve", timeout="1h")


async def _parked_on_event(engine: Engine) -> str:
    engine.workflow("approval")(approval)
    run_id = await engine.start("approval")
    for _ in range(100):
        step = (await engine.status(run_id)).steps.get("approve")
        if step is not None and step.status == "scheduled":
            break
        await asyncio.sleep(0.05)
    return run_id


async def test_send_event_is_confirmed_csrf_guarded_and_read_only_aware(engine: Engine) -> None:
    async with engine:
        run_id = await _parked_on_event(engine)
        async with client_for(dashboard_app(engine)) as client:
            page = (await client.get("/run", params={"id": run_id})).text
            assert "Why it waits" in page and "waits for event &#39;approve&#39;" in page
            assert 'data-action="send-event"' in page and 'class="took"' in page
            confirm = await client.get(
                "/run/confirm",
                params={
                    "id": run_id,
                    "action": "send-event",
                    "event": "approve",
                    "payload": '{"ok": true}',
                },
            )
            assert confirm.status_code == 200, confirm.text
            assert '<input type="hidden" name="event" value="approve">' in confirm.text
            token = csrf_of(confirm.text)
            form = {
                "id": run_id,
                "action": "send-event",
                "event": "approve",
                "payload": '{"ok": true}',
            }
            refused = await client.post("/run/action", data=form, headers=ORIGIN)
            assert refused.status_code == 403
            bad_json = await client.post(
                "/run/action",
                data={**form, "payload": "{nope", "csrf_token": token},
                headers=ORIGIN,
            )
            assert bad_json.status_code == 400 and "not JSON" in bad_json.text
            other = await client.post(
                "/run/action", data={**form, "event": "other", "csrf_token": token}, headers=ORIGIN
            )
            assert other.status_code == 400 and "waits for: approve" in other.text
            done = await client.post(
                "/run/action", data={**form, "csrf_token": token}, headers=ORIGIN
            )
            assert done.status_code == 303, done.text
        assert await engine.result(run_id, timeout=10) == {"ok": True}
        second = await _parked_on_event(engine)
        async with client_for(dashboard_app(engine, read_only=True)) as client:
            page = (await client.get("/run", params={"id": second})).text
            assert 'data-action="send-event"' not in page
            token = csrf_of(page)
            form = {"id": second, "action": "send-event", "event": "approve", "csrf_token": token}
            assert (await client.post("/run/action", data=form, headers=ORIGIN)).status_code == 403
        await engine.cancel(second)


async def test_a_queued_run_says_why_it_waits(engine: Engine) -> None:
    engine.queue("orders", concurrency=1)

    @engine.workflow("order")
    async def order(ctx: WorkflowContext, data: Any) -> Any:
        return data

    run_id = await engine.start("order", queue="orders")  # nothing serves: it stays queued
    delayed = await engine.start("order", delay="1h")
    async with client_for(dashboard_app(engine)) as client:
        page = (await client.get("/run", params={"id": run_id})).text
        assert "Waiting for admission to queue orders: 0 of 1 slots taken" in page
        later = (await client.get("/run", params={"id": delayed})).text
        assert "Delayed: it begins no earlier than" in later
