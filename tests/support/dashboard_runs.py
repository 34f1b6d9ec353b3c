"""Runs in every status, for the dashboard's tests (ASGI and browser).

``seed_runs(engine)`` registers a few workflows on ``engine``, serves it until the runs
that end have ended, and leaves it a client with runs waiting, suspended, cancelled and
compensating, and one run queued on the queue ``orders`` (key ``eu``, priority 5, a
deadline an hour away) that nobody admits. Returns the run id of each status (and of a
child run, and of a run with an awkward id whose input holds markup).
"""

from __future__ import annotations

import asyncio
from typing import Any

from engine_core import Engine, WorkflowContext, WorkflowRunFailedError

WEIRD_ID = 'weird/<b>id</b>?q=1#frag&x=%20"'
SCRIPT_INPUT = {"note": "<script>window.pwned = 1</script>", "big": list(range(40))}


QUEUE = "orders"


def register(engine: Engine) -> None:
    engine.queue(QUEUE, concurrency=2, key_concurrency=1, rate="30/1m")
    tries = {"charge": 0}

    async def charge(order: dict[str, Any]) -> dict[str, Any]:
        tries["charge"] += 1
        if tries["charge"] % 2 == 1:
            raise ConnectionError("gateway timeout")
        return {"charged": order.get("amount", 0)}

    async def refund(charged: Any) -> None:
        return None

    async def refund_badly(charged: Any) -> None:
        raise RuntimeError("refund endpoint is down")

    async def declined() -> None:
        raise ValueError("card declined")

    @engine.workflow("ship")
    async def ship(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.step("label", lambda: {"label": "L-1"})

    @engine.workflow("shop")
    async def shop(ctx: WorkflowContext, data: dict[str, Any]) -> Any:
        await ctx.step("reserve", lambda: {"items": 2})
        paid = await ctx.step("charge", charge, data, retries=1, retry_delay=0)
        await ctx.sleep("cool-off", "50ms")
        approval = await ctx.wait_for_event("approval", timeout="50ms")
        shipped = await ctx.child("ship", "ship", {"order": data.get("id")})
        return {"paid": paid, "approval": approval, "shipped": shipped}

    @engine.workflow("fails")
    async def fails(ctx: WorkflowContext, data: Any) -> Any:
        await ctx.step("reserve", lambda: {"items": 1})
        return await ctx.step("pay", declined)

    @engine.workflow("refunds")
    async def refunds(ctx: WorkflowContext, data: Any) -> Any:
        await ctx.step("charge", lambda: {"charged": 5}, compensate=refund)
        return await ctx.step("ship", declined)

    @engine.workflow("refunds-badly")
    async def refunds_badly(ctx: WorkflowContext, data: Any) -> Any:
        await ctx.step("charge", lambda: {"charged": 5}, compensate=refund_badly)
        return await ctx.step("ship", declined)

    @engine.workflow("waits")
    async def waits(ctx: WorkflowContext, data: Any) -> Any:
        await ctx.step("prepare", lambda: {"ready": True}, compensate=refund)
        return await ctx.wait_for_event("go")


async def _until_waiting(engine: Engine, run_id: str) -> None:
    for _ in range(1000):
        steps = (await engine.status(run_id)).steps
        if "go" in steps and steps["go"].status == "scheduled":
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"run {run_id} never reached its wait")


async def seed_runs(engine: Engine) -> dict[str, str]:
    """Runs in every status on ``engine``'s store (see the module docstring)."""
    register(engine)
    ids = {
        "completed": "order-completed",
        "failed": "order-failed",
        "compensated": "order-compensated",
        "compensation_failed": "order-compensation-failed",
        "running": "order-running",
        "suspended": "order-suspended",
        "cancelled": "order-cancelled",
        "compensating": "order-compensating",
        "queued": "order-queued",
        "weird": WEIRD_ID,
    }
    async with engine:
        await engine.start("shop", {"id": 7, "amount": 42}, run_id=ids["completed"])
        await engine.start("fails", {"id": 8}, run_id=ids["failed"])
        await engine.start("refunds", {"id": 9}, run_id=ids["compensated"])
        await engine.start("refunds-badly", {"id": 10}, run_id=ids["compensation_failed"])
        for key in ("running", "suspended", "cancelled", "compensating"):
            await engine.start("waits", {"id": key}, run_id=ids[key])
        await engine.start("waits", SCRIPT_INPUT, run_id=ids["weird"])
        await engine.result(ids["completed"], timeout=30)
        for key in ("failed", "compensated", "compensation_failed"):
            try:
                await engine.result(ids[key], timeout=30)
            except WorkflowRunFailedError:
                pass
        for key in ("running", "suspended", "cancelled", "compensating", "weird"):
            await _until_waiting(engine, ids[key])
        await engine.suspend(ids["suspended"])
        await engine.cancel(ids["cancelled"])
    # A client now: the compensation is owed, and nobody here drives it.
    await engine.cancel(ids["compensating"], compensate=True)
    # Queued with nobody serving, so it stays queued.
    await engine.start(
        "waits",
        {"id": "queued"},
        run_id=ids["queued"],
        queue=QUEUE,
        key="eu",
        priority=5,
        deadline="1h",
    )
    ids["child"] = f"{ids['completed']}:ship"
    for key, run_id in ids.items():
        status = (await engine.status(run_id)).status
        expected = {"weird": "running", "child": "completed"}.get(key, key)
        assert status == expected, (key, status)
    return ids
