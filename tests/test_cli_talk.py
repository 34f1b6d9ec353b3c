"""``pikku-mongo runs update`` and ``runs value`` talk to a running run from another
process; ``runs show`` lists its values and pending updates
(docs/guides/values-and-updates.md)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from engine_core import Engine, WorkflowContext
from tests.conftest import mongo_store, with_database
from tests.test_cli_operator import run


def _register(engine: Engine) -> None:
    @engine.workflow("desk")
    async def desk(ctx: WorkflowContext, data: Any) -> str:
        await ctx.set_value("stage", "open")
        while True:
            req = await ctx.wait_for_update("ask", timeout="60s")
            if req is None:
                return "idle"
            if req.payload == "bye":
                await req.reply("closing")
                return "closed"
            if not isinstance(req.payload, dict):
                await req.reject("send an object")
                continue
            await ctx.set_value("stage", req.payload.get("stage", "?"))
            await req.reply({"seen": req.payload})


async def _cli(*args: str, uri: str) -> Any:
    return await asyncio.to_thread(run, *args, uri=uri)


async def test_update_value_and_show_from_the_command_line(nx_uri: str) -> None:
    store = await mongo_store(nx_uri)
    uri = with_database(nx_uri, store.database.name)
    engine = Engine(store, lease_ttl="2s")
    _register(engine)
    try:
        async with engine:
            run_id = await engine.start("desk")
            value = await _cli("runs", "value", run_id, "stage", uri=uri)
            assert (value.returncode, value.stdout.strip()) == (0, '"open"')
            answer = await _cli(
                "runs", "update", run_id, "ask", "--payload", '{"stage": "packed"}',
                "--update-id", "a-1", "--json", uri=uri,
            )  # fmt: skip
            assert answer.returncode == 0, answer.stderr
            assert json.loads(answer.stdout)["answer"] == {"seen": {"stage": "packed"}}
            again = await _cli(
                "runs", "update", run_id, "ask", "--payload", '{"stage": "x"}',
                "--update-id", "a-1", uri=uri,
            )  # fmt: skip
            assert json.loads(again.stdout) == {"seen": {"stage": "packed"}}  # the first answer
            refused = await _cli("runs", "update", run_id, "ask", "--payload", "7", uri=uri)
            assert refused.returncode == 1 and "send an object" in refused.stderr
            bad = await _cli("runs", "update", run_id, "ask", "--payload", "{nope", uri=uri)
            assert bad.returncode == 1 and "--payload is not JSON" in bad.stderr
            value = await _cli("runs", "value", run_id, "stage", "--json", uri=uri)
            assert json.loads(value.stdout)["value"] == "packed"
            shown = await _cli("runs", "show", run_id, uri=uri)
            assert 'stage  "packed"' in shown.stdout or "stage  packed" in shown.stdout
            assert await engine.update(run_id, "ask", "bye", timeout=30) == "closing"
            assert await engine.result(run_id, timeout=30) == "closed"
            gone = await _cli("runs", "value", run_id, "nothing", "--wait", "5", uri=uri)
            assert gone.returncode == 1 and "ended" in gone.stderr
    finally:
        await store.close()


async def test_show_lists_pending_updates(nx_uri: str) -> None:
    store = await mongo_store(nx_uri)
    uri = with_database(nx_uri, store.database.name)
    engine = Engine(store, lease_ttl="2s")

    @engine.workflow("deaf")
    async def deaf(ctx: WorkflowContext, data: Any) -> None:
        await ctx.wait_for_event("go")

    try:
        async with engine:
            run_id = await engine.start("deaf")
            late = await _cli(
                "runs", "update", run_id, "ask", "--update-id", "p-1", "--wait", "0.5", uri=uri
            )
            assert late.returncode == 1 and "timed out" in late.stderr
            shown = await _cli("runs", "show", run_id, "--json", uri=uri)
            assert json.loads(shown.stdout)["pending_updates"] == [
                {"update_id": "p-1", "name": "ask", "taken": False}
            ]
            text = await _cli("runs", "show", run_id, uri=uri)
            assert "pending update" in text.stdout and "p-1" in text.stdout
            await engine.cancel(run_id)
    finally:
        await store.close()
