"""The dashboard's safety: access (token, auth callable, loopback only), CSRF and origin
checks on every POST, read-only mode, response headers, and mounting under a prefix; on
both stores, like the pages."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Mount

from engine_core import Engine, WorkflowContext
from engine_core.memory import InMemoryStore
from pikku_mongo.dashboard import dashboard_app
from tests.dashboard.conftest import client_for, csrf, csrf_of

TOKEN = "s3cret-token-for-tests"


@pytest.fixture
async def waiting(engine: Engine) -> AsyncIterator[tuple[Engine, str]]:
    """A client engine (on each store) with one run waiting for an event."""

    @engine.workflow("waits")
    async def waits(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("go")

    run_id = await engine.start("waits", {"n": 1}, run_id="w-1")
    yield engine, run_id


def form(run_id: str, token: str, action: str = "cancel") -> dict[str, str]:
    return {"id": run_id, "action": action, "csrf_token": token}


async def test_posts_need_a_valid_csrf_token(waiting: tuple[Engine, str]) -> None:
    engine, run_id = waiting
    async with client_for(dashboard_app(engine)) as client:
        no_cookie = await client.post("/run/action", data=form(run_id, "0" * 64))
        assert no_cookie.status_code == 403 and "CSRF" in no_cookie.text
        token = await csrf(client)
        tokenless = await client.post("/run/action", data={"id": run_id, "action": "cancel"})
        assert tokenless.status_code == 403
        wrong = await client.post("/run/action", data=form(run_id, "f" * 64))
        assert wrong.status_code == 403
        twice = await client.post(
            "/run/action",
            content=f"id={run_id}&action=cancel&csrf_token={token}&csrf_token={token}",
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert twice.status_code == 403
        # A token belongs to its cookie: another browser's token does not fit this one.
        async with client_for(dashboard_app(engine)) as other:
            foreign = await csrf(other)
        assert (await client.post("/run/action", data=form(run_id, foreign))).status_code == 403
        assert (await engine.status(run_id)).status == "running"
        ok = await client.post("/run/action", data=form(run_id, token))
        assert ok.status_code == 303
    assert (await engine.status(run_id)).status == "cancelled"


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Origin": "http://127.0.0.1:9999"},
        {"Referer": "http://evil.example/page"},
        {"Origin": "http://evil.example", "Referer": "http://127.0.0.1/runs"},
    ],
)
async def test_cross_site_posts_are_refused(
    waiting: tuple[Engine, str], headers: dict[str, str]
) -> None:
    engine, run_id = waiting
    async with client_for(dashboard_app(engine)) as client:
        token = await csrf(client)
        refused = await client.post("/run/action", data=form(run_id, token), headers=headers)
        assert refused.status_code == 403 and "cross-site" in refused.text
    assert (await engine.status(run_id)).status == "running"


async def test_same_origin_and_trusted_origins_are_accepted(waiting: tuple[Engine, str]) -> None:
    engine, run_id = waiting
    app = dashboard_app(engine, trusted_origins=["https://ops.example"])
    async with client_for(app) as client:
        token = await csrf(client)
        same = await client.post(
            "/run/action",
            data=form(run_id, token, "suspend"),
            headers={"Referer": "http://127.0.0.1/run?id=w-1"},
        )
        assert same.status_code == 303
        trusted = await client.post(
            "/run/action",
            data=form(run_id, token, "resume"),
            headers={"Origin": "https://ops.example"},
        )
        assert trusted.status_code == 303
    assert (await engine.status(run_id)).status == "running"


async def test_a_form_must_be_urlencoded_and_small(waiting: tuple[Engine, str]) -> None:
    engine, run_id = waiting
    async with client_for(dashboard_app(engine)) as client:
        token = await csrf(client)
        as_json = await client.post("/run/action", json=form(run_id, token))
        assert as_json.status_code == 400
        huge = await client.post("/run/action", data={**form(run_id, token), "pad": "x" * 20000})
        assert huge.status_code == 400 and "larger than" in huge.text


async def test_read_only_offers_and_accepts_no_action(waiting: tuple[Engine, str]) -> None:
    engine, run_id = waiting
    async with client_for(dashboard_app(engine, read_only=True)) as client:
        page = await client.get("/run", params={"id": run_id})
        assert page.status_code == 200 and "data-action=" not in page.text
        assert "read-only" in page.text
        confirm = await client.get("/run/confirm", params={"id": run_id, "action": "cancel"})
        assert confirm.status_code == 403
        token = csrf_of(page.text)
        post = await client.post("/run/action", data=form(run_id, token))
        assert post.status_code == 403 and "read-only" in post.text
    assert (await engine.status(run_id)).status == "running"


async def test_token_bearer_header_or_login_session(waiting: tuple[Engine, str]) -> None:
    engine, run_id = waiting
    app = dashboard_app(engine, token=TOKEN)
    async with client_for(app) as client:
        anonymous = await client.get("/runs")
        assert anonymous.status_code == 303 and anonymous.headers["location"] == "/login"
        assert (await client.get("/runs", headers={"HX-Request": "true"})).status_code == 401
        assert (await client.get("/run", params={"id": run_id})).status_code == 303
        bad = await client.get("/runs", headers={"Authorization": "Bearer wrong-token-x"})
        assert bad.status_code == 303
        bearer = await client.get("/runs", headers={"Authorization": f"Bearer {TOKEN}"})
        assert bearer.status_code == 200 and "w-1" in bearer.text
        login_form = await client.get("/login")
        assert login_form.status_code == 200 and 'type="password"' in login_form.text
        token = csrf_of(login_form.text)
        wrong = await client.post("/login", data={"token": "not-the-token", "csrf_token": token})
        assert wrong.status_code == 401 and "not the dashboard" in wrong.text
        no_csrf = await client.post("/login", data={"token": TOKEN})
        assert no_csrf.status_code == 403
        right = await client.post("/login", data={"token": TOKEN, "csrf_token": token})
        assert right.status_code == 303
        cookie = right.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "max-age=" in cookie
        assert TOKEN not in right.headers["set-cookie"]
        page = await client.get("/runs")
        assert page.status_code == 200 and "Log out" in page.text
        action = await client.post("/run/action", data=form(run_id, csrf_of(page.text)))
        assert action.status_code == 303
        out = await client.post("/logout", data={"csrf_token": csrf_of(page.text)})
        assert out.status_code == 303
        assert (await client.get("/runs")).status_code == 303
    assert (await engine.status(run_id)).status == "cancelled"
    # A session signed for one token is worth nothing under another.
    async with client_for(app) as client:
        login = csrf_of((await client.get("/login")).text)
        await client.post("/login", data={"token": TOKEN, "csrf_token": login})
        session = client.cookies.get("pikku_dashboard_session")
    assert session is not None
    async with client_for(dashboard_app(engine, token=TOKEN + "-new")) as client:
        client.cookies.set("pikku_dashboard_session", session)
        assert (await client.get("/runs")).status_code == 303


async def test_auth_callable_decides(waiting: tuple[Engine, str]) -> None:
    engine, _ = waiting

    def only_ops(request: Request) -> bool:
        return request.headers.get("x-user") == "ops"

    async def async_ops(request: Request) -> bool:
        return request.headers.get("x-user") == "ops"

    for auth in (only_ops, async_ops):
        # Not loopback: with an auth callable that does not matter.
        async with client_for(dashboard_app(engine, auth=auth), client=("10.9.8.7", 1)) as c:
            assert (await c.get("/runs")).status_code == 403
            assert (await c.get("/runs", headers={"x-user": "ops"})).status_code == 200


async def test_without_auth_only_loopback_is_served(waiting: tuple[Engine, str]) -> None:
    engine, _ = waiting
    app = dashboard_app(engine)
    async with client_for(app, client=("10.9.8.7", 1)) as remote:
        page = await remote.get("/runs")
        assert page.status_code == 403 and "only answers loopback clients" in page.text
    # A page elsewhere that rebinds its name to 127.0.0.1 brings its own Host.
    async with client_for(app, base_url="http://evil.example") as rebound:
        page = await rebound.get("/runs")
        assert page.status_code == 403 and "loopback host" in page.text
    for base in ("http://localhost:8642", "http://[::1]:8642", "http://127.0.0.2"):
        async with client_for(app, base_url=base) as local:
            assert (await local.get("/runs")).status_code == 200, base


async def test_security_headers_on_every_response(waiting: tuple[Engine, str]) -> None:
    engine, _ = waiting
    async with client_for(dashboard_app(engine)) as client:
        first = await client.get("/runs")
        assert first.headers["cache-control"] == "no-store"
        cookie = first.headers["set-cookie"].lower()
        assert "pikku_dashboard_csrf=" in cookie and "httponly" in cookie
        assert "samesite=strict" in cookie
        for path in ("/runs", "/static/htmx.min.js", "/nothing", "/run?id=missing"):
            response = await client.get(path)
            assert response.headers["x-frame-options"] == "DENY", path
            csp = response.headers["content-security-policy"]
            assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp
            assert response.headers["x-content-type-options"] == "nosniff"


async def test_static_files_are_served_from_the_package(waiting: tuple[Engine, str]) -> None:
    engine, _ = waiting
    async with client_for(dashboard_app(engine, token=TOKEN)) as client:
        htmx = await client.get("/static/htmx.min.js")
        assert htmx.status_code == 200 and "javascript" in htmx.headers["content-type"]
        assert htmx.text.startswith("var htmx=function()")
        assert (await client.get("/static/htmx.LICENSE.txt")).status_code == 200
        assert (await client.get("/static/dashboard.css")).status_code == 200
        assert (await client.get("/static/../app.py")).status_code == 404


async def test_mounted_under_a_prefix(waiting: tuple[Engine, str]) -> None:
    engine, run_id = waiting
    host = Starlette(routes=[Mount("/ops/dashboard", app=dashboard_app(engine))])
    async with client_for(host) as client:
        page = await client.get("/ops/dashboard/runs")
        assert page.status_code == 200
        assert 'href="/ops/dashboard/run?id=w-1"' in page.text
        assert 'src="/ops/dashboard/static/htmx.min.js"' in page.text
        assert 'hx-get="/ops/dashboard/runs"' in page.text
        assert "path=/ops/dashboard" in page.headers["set-cookie"].lower()
        assert (await client.get("/ops/dashboard/static/htmx.min.js")).status_code == 200
        assert (await client.get("/ops/dashboard/")).headers["location"] == "/ops/dashboard/runs"
        confirm = await client.get(
            "/ops/dashboard/run/confirm", params={"id": run_id, "action": "suspend"}
        )
        assert 'action="/ops/dashboard/run/action"' in confirm.text
        done = await client.post(
            "/ops/dashboard/run/action", data=form(run_id, csrf_of(page.text), "suspend")
        )
        assert done.status_code == 303
        assert done.headers["location"] == "/ops/dashboard/run?id=w-1&done=suspend"
    assert (await engine.status(run_id)).status == "suspended"


def test_options_are_checked() -> None:
    engine = Engine(InMemoryStore())
    with pytest.raises(ValueError, match="at least 8"):
        dashboard_app(engine, token="short")
    with pytest.raises(ValueError, match="trace_id"):
        dashboard_app(engine, trace_url="javascript:alert(1)//{trace_id}")
    with pytest.raises(ValueError, match="trace_id"):
        dashboard_app(engine, trace_url="https://tracing.example/")
    with pytest.raises(TypeError):
        dashboard_app(engine, auth="yes")  # type: ignore[arg-type]


async def test_trace_link(waiting: tuple[Engine, str]) -> None:
    engine, run_id = waiting
    app = dashboard_app(engine, trace_url="https://tracing.example/trace/{trace_id}")
    async with client_for(app) as client:
        page = (await client.get("/run", params={"id": run_id})).text
    trace_id = (await engine.status(run_id)).trace_id
    assert f'href="https://tracing.example/trace/{trace_id}"' in page


async def test_a_store_failure_is_a_500_page_not_a_traceback(
    waiting: tuple[Engine, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, _ = waiting

    async def broken(**kwargs: Any) -> dict[str, int]:
        raise ConnectionError("the server went away")

    monkeypatch.setattr(engine.store, "count_runs", broken)
    async with client_for(dashboard_app(engine)) as client:
        page = await client.get("/runs")
    assert page.status_code == 500 and "ConnectionError" in page.text
    assert "the server went away" not in page.text and "Traceback" not in page.text
