"""The dashboard's CSRF key: str or bytes, from PIKKU_DASHBOARD_SECRET, one key for every
process behind one address, and a warning when that cannot hold."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import httpx
import pytest

from engine_core import Engine, InvalidOptionError, WorkflowContext
from engine_core.memory import InMemoryStore
from pikku_mongo import MongoStore
from pikku_mongo.dashboard import dashboard_app, secret
from pikku_mongo.dashboard.security import CSRF_COOKIE, Security
from tests.conftest import with_database
from tests.dashboard.conftest import csrf_of, ui_server


def test_a_secret_is_str_or_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(secret.ENV_SECRET, raising=False)
    cookie = "ab" * 32
    as_str = Security(secret="from-env").csrf_token(cookie)
    assert as_str == Security(secret=b"from-env").csrf_token(cookie)
    monkeypatch.setenv(secret.ENV_SECRET, "from-env")
    assert Security().csrf_token(cookie) == as_str
    # Two processes given one token agree too.
    monkeypatch.delenv(secret.ENV_SECRET)
    token = "a-long-enough-token"
    assert Security(token=token).csrf_token(cookie) == Security(token=token).csrf_token(cookie)
    for wrong in (42, "", ["x"]):
        with pytest.raises(InvalidOptionError, match="must be a non-empty str or bytes"):
            dashboard_app(Engine(InMemoryStore()), secret=wrong)  # type: ignore[arg-type]


def test_a_random_key_warns_once_when_several_processes_may_serve(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(secret.ENV_SECRET, raising=False)
    monkeypatch.setattr(secret, "_warned", False)
    monkeypatch.setenv("WEB_CONCURRENCY", "1")
    with caplog.at_level(logging.WARNING, logger="pikku_mongo.dashboard"):
        dashboard_app(Engine(InMemoryStore()))
        assert caplog.records == []
        monkeypatch.setenv("WEB_CONCURRENCY", "2")
        dashboard_app(Engine(InMemoryStore()))
        dashboard_app(Engine(InMemoryStore()))
        dashboard_app(Engine(InMemoryStore()), secret="shared")
    [warning] = caplog.records
    assert "PIKKU_DASHBOARD_SECRET" in warning.getMessage()


@pytest.fixture
async def waiting_runs(nx_uri: str) -> Any:
    uri = with_database(nx_uri, f"ui2_{uuid.uuid4().hex[:12]}")
    store = MongoStore.from_uri(uri)
    await store.init()
    engine = Engine(store)

    @engine.workflow("billing")
    async def billing(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("go")

    ids = [f"bill-{i}" for i in range(6)]
    for run_id in ids:
        await engine.start("billing", run_id=run_id)
    yield uri, engine, ids
    await store.close()


async def test_two_processes_behind_one_address_accept_every_action(waiting_runs: Any) -> None:
    uri, engine, ids = waiting_runs
    env = {secret.ENV_SECRET: "one-secret-for-the-fleet"}
    front = "127.0.0.1:8000"  # the one address a proxy would serve them under
    headers = {"Host": front, "Origin": f"http://{front}"}
    with ui_server(uri, env=env) as first, ui_server(uri, env=env) as second:
        async with httpx.AsyncClient() as client:
            statuses = []
            for i, run_id in enumerate(ids):
                # The page from one process, the form posted to the other.
                page_from, post_to = (first, second) if i % 2 else (second, first)
                page = await client.get(f"{page_from}/run", params={"id": run_id}, headers=headers)
                assert page.status_code == 200, page.text
                # One browser: its CSRF cookie goes to whichever process answers.
                cookie = page.cookies.get(CSRF_COOKIE) or client.cookies.get(CSRF_COOKIE)
                client.cookies.clear()
                client.cookies.set(CSRF_COOKIE, cookie)
                done = await client.post(
                    f"{post_to}/run/action",
                    data={"id": run_id, "action": "suspend", "csrf_token": csrf_of(page.text)},
                    headers=headers,
                )
                statuses.append(done.status_code)
    assert statuses == [303] * len(ids)
    for run_id in ids:
        assert (await engine.status(run_id)).status == "suspended"
