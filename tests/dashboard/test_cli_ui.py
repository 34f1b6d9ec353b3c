"""``pikku-mongo ui``: its refusals, and the dashboard it serves from a live nx-27017."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from typing import Any

import httpx
import pytest

from engine_core import Engine, WorkflowContext
from pikku_mongo import MongoStore
from tests.conftest import with_database
from tests.dashboard.conftest import csrf_of, ui_server


def ui(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pikku_mongo.cli", "ui", *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.10", "::"])
def test_ui_refuses_to_listen_beyond_loopback_without_a_token(host: str) -> None:
    done = ui("--host", host, env={"MONGODB_URI": "mongodb://127.0.0.1:1/x"})
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1
    assert "refusing to serve the dashboard" in done.stderr and "--token" in done.stderr


def test_ui_errors_are_one_line() -> None:
    short = ui("--token", "short")
    assert short.returncode == 1 and "at least 8" in short.stderr
    env = {k: v for k, v in os.environ.items() if k != "MONGODB_URI"}
    no_uri = subprocess.run(
        [sys.executable, "-m", "pikku_mongo.cli", "ui"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert no_uri.returncode == 1 and "MONGODB_URI" in no_uri.stderr


@pytest.fixture
async def ui_uri(nx_uri: str) -> Any:
    uri = with_database(nx_uri, f"ui_{uuid.uuid4().hex[:12]}")
    store = MongoStore.from_uri(uri)
    await store.init()
    engine = Engine(store)

    @engine.workflow("billing")
    async def billing(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("go")

    @engine.workflow("reports")
    async def reports(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("go")

    await engine.start("billing", {"n": 1}, run_id="bill/1")
    await engine.start("reports", {"n": 2}, run_id="report-1")
    yield uri, engine
    await store.close()


async def test_ui_serves_the_store_and_steers_runs(ui_uri: Any) -> None:
    uri, engine = ui_uri
    with ui_server(uri) as base:
        async with httpx.AsyncClient(base_url=base) as client:
            page = await client.get("/runs")
            assert page.status_code == 200
            # The workflow filter's choices come from the store: nothing is registered there.
            assert '<option value="billing">billing</option>' in page.text
            assert '<option value="reports">reports</option>' in page.text
            assert 'href="/run?id=bill%2F1"' in page.text
            run_page = await client.get("/run", params={"id": "bill/1"})
            assert run_page.status_code == 200 and "bill/1" in run_page.text
            token = csrf_of(run_page.text)
            done = await client.post(
                "/run/action",
                data={"id": "bill/1", "action": "suspend", "csrf_token": token},
                headers={"Origin": base},
            )
            assert done.status_code == 303
    assert (await engine.status("bill/1")).status == "suspended"


async def test_ui_with_a_token(ui_uri: Any) -> None:
    uri, _ = ui_uri
    token = "a-token-for-the-ui-test"
    with ui_server(uri, env={"PIKKU_MONGO_UI_TOKEN": token}) as base:
        async with httpx.AsyncClient(base_url=base) as client:
            assert (await client.get("/runs")).status_code == 303
            bearer = {"Authorization": f"Bearer {token}"}
            authorised = await client.get("/runs", headers=bearer)
            assert authorised.status_code == 200 and "report-1" in authorised.text


def test_ui_reports_a_port_in_use(nx_uri: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = ui("--port", str(port), env={"MONGODB_URI": with_database(nx_uri, "ui_port")})
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1
    assert "cannot listen on 127.0.0.1" in done.stderr
