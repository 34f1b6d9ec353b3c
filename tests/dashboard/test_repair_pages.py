"""Issue 21 on the dashboard (both stores): "fork from here" on each step of a run page,
"fork from failure" and "cancel" for the runs list's filtered set, each behind the
confirmation page and the CSRF guard; forks and their originals linked both ways."""

from __future__ import annotations

import html
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from engine_core import Engine, WorkflowContext, WorkflowRunFailedError
from pikku_mongo.dashboard import dashboard_app
from tests.dashboard.conftest import client_for, csrf_of

ORIGIN = {"Origin": "http://127.0.0.1"}


def register(engine: Engine, broken: dict[str, bool]) -> None:
    def reserve(n: int) -> int:
        return n

    def pay(n: int) -> int:
        if broken["on"]:
            raise ConnectionError("provider down")
        return n * 10

    @engine.workflow("pay")
    async def pay_flow(ctx: WorkflowContext, n: int) -> int:
        await ctx.step("reserve", reserve, n)
        return await ctx.step("pay", pay, n)

    @engine.workflow("wait")
    async def wait(ctx: WorkflowContext, n: int) -> Any:
        return await ctx.wait_for_event("go")


async def _failed(engine: Engine, n: int) -> str:
    run_id = await engine.start("pay", n)
    with pytest.raises(WorkflowRunFailedError):
        await engine.result(run_id, timeout=10)
    return run_id


async def test_fork_from_here_is_confirmed_guarded_and_linked(engine: Engine) -> None:
    broken = {"on": True}
    register(engine, broken)
    async with engine:
        original = await _failed(engine, 1)
        broken["on"] = False
        async with client_for(dashboard_app(engine)) as client:
            page = (await client.get("/run", params={"id": original})).text
            assert page.count('data-action="fork-here"') == 2  # one per step
            confirm = await client.get(
                "/run/confirm", params={"id": original, "action": "fork", "step": "reserve"}
            )
            assert confirm.status_code == 200, confirm.text
            assert '<input type="hidden" name="step" value="reserve">' in confirm.text
            form = {"id": original, "action": "fork", "step": "reserve"}
            refused = await client.post("/run/action", data=form, headers=ORIGIN)
            assert refused.status_code == 403
            assert await engine.list_forks(original) == []
            token = csrf_of(confirm.text)
            unknown = await client.post(
                "/run/action", data={**form, "step": "ship", "csrf_token": token}, headers=ORIGIN
            )
            assert unknown.status_code in (400, 404) and "no step" in html.unescape(unknown.text)
            done = await client.post(
                "/run/action", data={**form, "csrf_token": token}, headers=ORIGIN
            )
            assert done.status_code == 303, done.text
            fork = parse_qs(urlsplit(done.headers["location"]).query)["id"][0]
            assert await engine.result(fork, timeout=10) == 10
            assert await engine.list_forks(original) == [fork]
            fork_page = (await client.get("/run", params={"id": fork})).text
            assert "Forked from" in fork_page and f"id={original}" in fork_page
            assert "from step reserve" in fork_page
            back = (await client.get("/run", params={"id": original})).text
            assert "Forks" in back and f"id={fork}" in back
        async with client_for(dashboard_app(engine, read_only=True)) as client:
            page = (await client.get("/run", params={"id": original})).text
            assert 'data-action="fork-here"' not in page
            token = csrf_of(page)
            form = {"id": original, "action": "fork", "csrf_token": token}
            assert (await client.post("/run/action", data=form, headers=ORIGIN)).status_code == 403


async def test_fork_from_failure_and_cancel_for_the_filtered_runs(engine: Engine) -> None:
    broken = {"on": True}
    register(engine, broken)
    async with engine:
        failed = [await _failed(engine, n) for n in range(3)]
        waiting = [await engine.start("wait", n) for n in range(2)]
        broken["on"] = False
        async with client_for(dashboard_app(engine)) as client:
            page = (await client.get("/runs", params={"workflow": "pay"})).text
            assert 'data-action="bulk-fork"' in page and 'data-action="bulk-cancel"' in page
            confirm = await client.get("/runs/confirm", params={"bulk": "fork", "workflow": "pay"})
            assert confirm.status_code == 200, confirm.text
            assert '<dd class="bulk-count">3</dd>' in confirm.text
            assert [await engine.list_forks(r) for r in failed] == [[], [], []]  # a dry run
            form = {"bulk": "fork", "workflow": "pay"}
            refused = await client.post("/runs/action", data=form, headers=ORIGIN)
            assert refused.status_code == 403
            token = csrf_of(confirm.text)
            done = await client.post(
                "/runs/action", data={**form, "csrf_token": token}, headers=ORIGIN
            )
            assert done.status_code == 303, done.text
            listed = await client.get(done.headers["location"])
            assert "Fork from failure: 3 run(s) done." in listed.text
            for run_id in failed:
                (fork,) = await engine.list_forks(run_id)
                assert (
                    await engine.result(fork, timeout=10)
                    == (await engine.status(run_id)).input * 10
                )

            # Cancel: the filtered set only, never without a filter, never of ended runs.
            page = (await client.get("/runs", params={"status": "failed"})).text
            assert 'data-action="bulk-fork"' in page and 'data-action="bulk-cancel"' not in page
            ended = await client.get("/runs/confirm", params={"bulk": "cancel", "status": "failed"})
            assert ended.status_code == 409
            unfiltered = await client.get("/runs/confirm", params={"bulk": "cancel"})
            assert unfiltered.status_code == 409
            confirm = await client.get(
                "/runs/confirm", params={"bulk": "cancel", "workflow": "wait"}
            )
            assert '<dd class="bulk-count">2</dd>' in confirm.text
            done = await client.post(
                "/runs/action",
                data={"bulk": "cancel", "workflow": "wait", "csrf_token": csrf_of(confirm.text)},
                headers=ORIGIN,
            )
            assert done.status_code == 303, done.text
            assert [(await engine.status(r)).status for r in waiting] == ["cancelled"] * 2
        async with client_for(dashboard_app(engine, read_only=True)) as client:
            page = (await client.get("/runs", params={"workflow": "pay"})).text
            assert 'data-action="bulk-fork"' not in page
            form = {"bulk": "fork", "workflow": "pay", "csrf_token": csrf_of(page)}
            assert (await client.post("/runs/action", data=form, headers=ORIGIN)).status_code == 403
