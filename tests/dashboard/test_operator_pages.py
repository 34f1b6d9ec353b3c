"""Issue 24 on the dashboard: a schedule's "Run now", the interval text, why a run
waits, and the "send event" action."""

from __future__ import annotations

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
