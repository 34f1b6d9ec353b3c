"""A FastAPI service that starts orders by name, with none of the workflow code, in
front of worker processes that pin their versions (as a new user deploys them): the
start takes the version the newest worker serves and is driven by it; an input the
workers' model refuses is a 422 at the API, recording nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from fastapi import FastAPI, HTTPException

from engine_core import Engine, InvalidInputError
from engine_core.fleet.registry import why_undriven
from tests.support.fleet import Fleet, client_engine


def tier_app(engine: Engine) -> FastAPI:
    app = FastAPI()

    @app.post("/orders", status_code=201)
    async def create(body: dict[str, Any]) -> dict[str, str]:
        try:
            return {"run_id": await engine.start("order", body)}
        except InvalidInputError as exc:
            raise HTTPException(422, detail=exc.errors) from None

    @app.get("/orders/{run_id}")
    async def show(run_id: str) -> dict[str, Any]:
        status = await engine.status(run_id)
        return {"status": status.status, "version": status.version, "output": status.output}

    return app


async def _ended(api: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    for _ in range(600):
        shown: dict[str, Any] = (await api.get(f"/orders/{run_id}")).json()
        if shown["status"] not in ("running", "queued"):
            return shown
        await asyncio.sleep(0.05)
    raise AssertionError(shown)


async def test_a_code_less_api_tier_starts_orders_that_the_pinned_fleet_drives(
    fleet: Fleet, chaos_uri: str
) -> None:
    fleet.spawn("--version", "v1")
    fleet.spawn("--version", "v2")  # the newest deploy
    # The tier: an engine with no workflow code and no declarations, a client.
    async with client_engine(chaos_uri, lambda engine: None, lease_ttl="2s") as tier:
        await _serve_orders(fleet, tier)


async def _serve_orders(fleet: Fleet, tier: Engine) -> None:
    transport = httpx.ASGITransport(app=tier_app(tier))
    async with httpx.AsyncClient(transport=transport, base_url="http://tier") as api:
        made = await api.post(
            "/orders", json={"order_id": "o-1", "lines": [{"sku": "a", "qty": 2}]}
        )
        assert made.status_code == 201, made.text
        run_id = made.json()["run_id"]
        shown = await _ended(api, run_id)
        assert shown == {"status": "completed", "version": "v2", "output": "packed o-1 on v2"}
        assert [(r["version"], r["run"]) for r in fleet.records("pack")] == [("v2", run_id)]
        refused = await api.post("/orders", json={"order_id": "o-2"})
        assert refused.status_code == 422
        assert refused.json()["detail"] == [
            {"loc": ["lines"], "msg": "field required", "type": "missing"}
        ]
        bad_qty = await api.post(
            "/orders", json={"order_id": "o-3", "lines": [{"sku": "a", "qty": 0}]}
        )
        assert bad_qty.status_code == 422 and "lines" in bad_qty.text
    assert [r.run_id for r in await tier.list_runs()] == [run_id]  # nothing else recorded
    workers = await tier.list_workers()
    assert why_undriven("order", "v2", workers) is None
    assert "version 'v0'" in str(why_undriven("order", "v0", workers))
