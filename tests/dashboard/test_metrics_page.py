"""``/metrics``: the engine's metrics in Prometheus text (``metrics=True``, ``ui
--metrics``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import engine_core.metrics
from engine_core import Engine, WorkflowContext
from pikku_mongo.dashboard import dashboard_app
from tests.dashboard.conftest import client_for, ui_server


@pytest.fixture(autouse=True)
def _reset_provider() -> Iterator[None]:
    yield
    engine_core.metrics.use_meter_provider(None)


async def test_metrics_serves_prometheus_text(engine: Engine) -> None:
    @engine.workflow("scraped")
    async def scraped(ctx: WorkflowContext, data: Any) -> int:
        return int(await ctx.step("s", lambda: 1))

    app = dashboard_app(engine, metrics=True)
    async with engine:
        run_id = await engine.start("scraped")
        await engine.result(run_id, timeout=10)
    async with client_for(app) as client:
        page = await client.get("/metrics")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/plain")
    text = page.text
    assert 'pikku_run_started_total{workflow="scraped"} 1.0' in text
    assert 'pikku_run_ended_total{status="completed",workflow="scraped"} 1.0' in text
    assert 'pikku_step_duration_seconds_bucket{kind="inline",le="+Inf",outcome="succeeded"}' in text
    assert "pikku_run_duration_seconds_sum" in text
    assert run_id not in text


async def test_no_metrics_page_unless_asked(engine: Engine) -> None:
    async with client_for(dashboard_app(engine)) as client:
        assert (await client.get("/metrics")).status_code == 404


async def test_metrics_page_keeps_the_access_check(engine: Engine) -> None:
    app = dashboard_app(engine, metrics=True, token="t0ken-for-the-metrics-test")
    async with client_for(app) as client:
        assert (await client.get("/metrics")).status_code in (401, 303)
        bearer = {"Authorization": "Bearer t0ken-for-the-metrics-test"}
        assert (await client.get("/metrics", headers=bearer)).status_code == 200


def test_ui_serves_metrics_when_asked(nx_uri: str) -> None:
    from tests.conftest import with_database

    with ui_server(with_database(nx_uri, "ui_metrics"), "--metrics") as base:
        page = httpx.get(base + "/metrics")
    assert page.status_code == 200
    assert "# TYPE" in page.text or page.text == ""
