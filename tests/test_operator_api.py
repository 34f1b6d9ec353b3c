"""Issue 24, the engine side: what an operator meets through the API."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import pytest

from engine_core import (
    Engine,
    EngineError,
    RunNotActiveError,
    StoreUnavailableError,
    WorkflowContext,
)
from engine_core.memory import InMemoryStore


async def test_an_event_to_an_ended_run_is_refused_and_nothing_is_stored(engine: Engine) -> None:
    @engine.workflow("quick")
    async def quick(ctx: WorkflowContext, data: Any) -> str:
        return "done"

    async with engine:
        run_id = await engine.start("quick")
        assert await engine.result(run_id, timeout=10) == "done"
        with pytest.raises(RunNotActiveError, match="has ended \\(completed\\)") as caught:
            await engine.send_event(run_id, "approval", {"ok": True})
    assert isinstance(caught.value, EngineError)
    assert caught.value.run_id == run_id and caught.value.status == "completed"
    assert await engine.store.consume_event(run_id, "approval", "probe") is None


async def test_a_listed_run_has_no_partial_steps(engine: Engine) -> None:
    @engine.workflow("five")
    async def five(ctx: WorkflowContext, data: Any) -> int:
        for i in range(5):
            await ctx.step(f"s{i}", lambda n=i: n)
        return 5

    async with engine:
        run_id = await engine.start("five")
        assert await engine.result(run_id, timeout=10) == 5
    assert len((await engine.status(run_id)).steps) == 5
    [listed] = await engine.list_runs()
    assert listed.run_id == run_id and listed.steps == {}


async def test_a_waiting_step_says_what_it_waits_for(engine: Engine) -> None:
    @engine.workflow("approval")
    async def approval(ctx: WorkflowContext, data: Any) -> Any:
        await ctx.sleep("nap", "1h")
        return await ctx.wait_for_event("approve", timeout="1h")

    @engine.workflow("waiter")
    async def waiter(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("approve", timeout="1h")

    async with engine:
        sleeping = await engine.start("approval")
        waiting = await engine.start("waiter")
        await asyncio.sleep(0.3)
        wait = (await engine.status(waiting)).steps["approve"]
        assert (wait.status, wait.kind) == ("scheduled", "event")
        assert wait.waiting_for is not None and wait.waiting_for.startswith("event 'approve'")
        nap = (await engine.status(sleeping)).steps["nap"]
        assert nap.kind == "sleep" and (nap.waiting_for or "").startswith("sleep until ")
        await engine.cancel(sleeping)
        nap = (await engine.status(sleeping)).steps["nap"]
        assert (nap.status, nap.waiting_for) == ("cancelled", None)


class HangingStore(InMemoryStore):
    """A store whose server stopped answering: every read waits forever."""

    async def get_run(self, run_id: str) -> Any:
        await asyncio.Event().wait()

    async def list_runs(self, **kwargs: Any) -> Any:
        await asyncio.Event().wait()

    async def get_runs(self, run_ids: Any, **kwargs: Any) -> Any:
        await asyncio.Event().wait()

    async def list_schedules(self) -> Any:
        await asyncio.Event().wait()


async def test_every_client_call_gives_up_after_store_timeout() -> None:
    engine = Engine(HangingStore(), store_timeout="300ms")
    calls = {
        "status": lambda: engine.status("r"),
        # ``result`` makes no read of its own (the waiters read the awaited runs
        # together, docs/guides/mongodb.md); their reads give up the same way.
        "result": lambda: engine.result("r", timeout=60),
        "history": lambda: engine.history("r"),
        "send_event": lambda: engine.send_event("r", "go"),
        "cancel": lambda: engine.cancel("r"),
        "list_runs": lambda: engine.list_runs(),
        "list_schedules": lambda: engine.list_schedules(),
    }
    for name, call in calls.items():
        began = time.monotonic()
        with pytest.raises(StoreUnavailableError, match=r"did not answer within 0\.3 s"):
            await call()
        assert time.monotonic() - began < 2, name


async def test_a_client_on_a_dead_server_raises_store_unavailable() -> None:
    from pikku_mongo import MongoStore

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = MongoStore.from_uri(f"mongodb://127.0.0.1:{port}/app")
    engine = Engine(store, store_timeout="1s")
    try:
        calls = (
            lambda: engine.status("r"),
            lambda: engine.list_runs(),
            lambda: engine.result("r", timeout=60),
        )
        for call in calls:
            began = time.monotonic()
            with pytest.raises(StoreUnavailableError):
                await call()
            assert time.monotonic() - began < 5
    finally:
        await store.close()
