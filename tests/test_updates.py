"""Updates a run answers (``engine.update``, ``ctx.wait_for_update``), on both stores
(docs/guides/values-and-updates.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from engine_core import (
    Engine,
    InvalidNameError,
    InvalidOptionError,
    NotSerializableError,
    RunNotActiveError,
    RunNotFoundError,
    UpdateAlreadyAnsweredError,
    UpdateRejectedError,
    WorkflowContext,
)
from engine_core.store import Store
from tests.conftest import mongo_store


@dataclass
class Address:
    to: str


def register_shipping(engine: Engine) -> None:
    """``shipping``: answers "change-address" updates until it gets "ship", then ends."""

    @engine.workflow("shipping")
    async def shipping(ctx: WorkflowContext, data: Any) -> str:
        address = "start"
        while True:
            req = await ctx.wait_for_update("change-address", returns=Address, timeout="30s")
            if req is None:
                return "timed out"
            if req.payload.to == "ship":
                await req.reply({"shipped": address})
                return address
            if req.payload.to == "":
                await req.reject("an address is needed")
                continue
            address = req.payload.to
            await ctx.step("log", lambda: None)
            await req.reply({"ok": True, "to": address})


async def test_an_update_is_answered_and_typed(engine: Engine) -> None:
    register_shipping(engine)
    async with engine:
        run_id = await engine.start("shipping")
        answer = await engine.update(run_id, "change-address", Address("Main St"), timeout=30)
        assert answer == {"ok": True, "to": "Main St"}
        with pytest.raises(UpdateRejectedError) as rejected:
            await engine.update(run_id, "change-address", {"to": ""}, timeout=30)
        assert rejected.value.reason == "an address is needed"
        assert isinstance(rejected.value, ValueError)
        shipped = await engine.update(run_id, "change-address", {"to": "ship"}, returns=dict)
        assert shipped == {"shipped": "Main St"}
        assert await engine.result(run_id, timeout=30) == "Main St"
        status = await engine.status(run_id)
        kinds = {key: step.kind for key, step in status.steps.items()}
        assert kinds["change-address"] == "update" and kinds["reply:change-address"] == "reply"
        assert status.steps["reply:change-address#1"].result == {"rejected": "an address is needed"}


async def test_updates_sent_before_the_wait_are_kept_and_taken_oldest_first(
    engine: Engine,
) -> None:
    @engine.workflow("late-waiter")
    async def late_waiter(ctx: WorkflowContext, data: Any) -> list[Any]:
        await ctx.wait_for_event("go")
        got = []
        for _ in range(3):
            req = await ctx.wait_for_update("add")
            assert req is not None
            got.append(req.payload)
            await req.reply(len(got))
        return got

    async with engine:
        run_id = await engine.start("late-waiter")
        calls = []
        for n in range(3):
            calls.append(asyncio.ensure_future(engine.update(run_id, "add", n, timeout=30)))
            await asyncio.sleep(0.05)  # sent in this order
        await asyncio.sleep(0.2)
        assert not any(call.done() for call in calls)
        pending = await engine.store.list_updates(run_id, pending=True)
        assert [u.payload for u in pending] == [0, 1, 2]
        await engine.send_event(run_id, "go")
        assert [await call for call in calls] == [1, 2, 3]
        assert await engine.result(run_id, timeout=30) == [0, 1, 2]
        assert await engine.store.list_updates(run_id, pending=True) == []


async def test_the_same_update_id_gets_the_first_answer_and_stores_nothing_new(
    engine: Engine, store: Store
) -> None:
    register_shipping(engine)
    async with engine:
        run_id = await engine.start("shipping")
        first = await engine.update(run_id, "change-address", {"to": "A"}, update_id="u-1")
        again = await engine.update(run_id, "change-address", {"to": "B"}, update_id="u-1")
        assert first == again == {"ok": True, "to": "A"}
        with pytest.raises(UpdateRejectedError):
            await engine.update(run_id, "change-address", {"to": ""}, update_id="u-2")
        await engine.update(run_id, "change-address", {"to": "ship"}, update_id="u-3")
        await engine.result(run_id, timeout=30)
        # After the run ended: the same answers, nothing stored.
        assert await engine.update(run_id, "change-address", None, update_id="u-1") == first
        with pytest.raises(UpdateRejectedError, match="an address is needed"):
            await engine.update(run_id, "change-address", None, update_id="u-2")
        kept = await store.list_updates(run_id, pending=False)
        assert [(u.update_id, u.payload) for u in kept] == [
            ("u-1", {"to": "A"}),
            ("u-2", {"to": ""}),
            ("u-3", {"to": "ship"}),
        ]
        with pytest.raises(RunNotActiveError, match="takes no more updates"):
            await engine.update(run_id, "change-address", {"to": "C"}, update_id="u-4")
        assert len(await store.list_updates(run_id, pending=False)) == 3


async def test_a_run_that_ends_without_answering_fails_the_caller(engine: Engine) -> None:
    @engine.workflow("ignores")
    async def ignores(ctx: WorkflowContext, data: Any) -> str:
        req = await ctx.wait_for_update("question")
        assert req is not None
        await ctx.wait_for_event("end")
        return "never answered"

    async with engine:
        run_id = await engine.start("ignores")
        waiting = asyncio.ensure_future(engine.update(run_id, "question", 1, update_id="q"))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        await engine.send_event(run_id, "end")
        with pytest.raises(RunNotActiveError, match="without answering update 'q'") as caught:
            await asyncio.wait_for(waiting, 30)
        assert caught.value.status == "completed"
        with pytest.raises(RunNotActiveError):  # a retry knows at once
            await engine.update(run_id, "question", 1, update_id="q", timeout=30)
        with pytest.raises(RunNotFoundError):
            await engine.update("no-such-run", "question", 1)


async def test_a_timeout_leaves_the_update_and_a_retry_gets_the_answer(
    engine: Engine, store: Store
) -> None:
    @engine.workflow("slow-answer")
    async def slow_answer(ctx: WorkflowContext, data: Any) -> None:
        await ctx.wait_for_event("go")
        req = await ctx.wait_for_update("q")
        assert req is not None
        await req.reply("at last")

    async with engine:
        run_id = await engine.start("slow-answer")
        with pytest.raises(TimeoutError, match="answering update 'q-1'"):
            await engine.update(run_id, "q", None, update_id="q-1", timeout=0.3)
        assert [u.update_id for u in await store.list_updates(run_id, pending=True)] == ["q-1"]
        await engine.send_event(run_id, "go")
        assert await engine.update(run_id, "q", None, update_id="q-1", timeout=30) == "at last"
        assert len(await store.list_updates(run_id, pending=False)) == 1


async def test_replies_are_durable_steps_answered_once(engine: Engine, store: Store) -> None:
    answered: list[str] = []
    answer = store.answer_update

    async def counted(run_id: str, update_id: str, *args: Any, **kwargs: Any) -> Any:
        answered.append(update_id)
        return await answer(run_id, update_id, *args, **kwargs)

    store.answer_update = counted  # type: ignore[method-assign]

    @engine.workflow("twice")
    async def twice(ctx: WorkflowContext, data: Any) -> list[str]:
        req = await ctx.wait_for_update("q")
        assert req is not None
        await req.reply("first")
        caught = []
        for attempt in (lambda: req.reply("second"), lambda: req.reject("no")):
            try:
                await attempt()
            except UpdateAlreadyAnsweredError as exc:
                caught.append(str(exc))
        await ctx.wait_for_event("more")  # parks: the next pass replays the reply
        return caught

    async with engine:
        run_id = await engine.start("twice")
        assert await engine.update(run_id, "q", None, update_id="u") == "first"
        await asyncio.sleep(0.2)
        await engine.send_event(run_id, "more")
        caught = await engine.result(run_id, timeout=30)
        assert len(caught) == 2 and all("answered already" in c for c in caught)
        assert answered == ["u"]  # the replay wrote nothing
        assert await engine.update(run_id, "q", None, update_id="u") == "first"


async def test_a_wait_for_an_update_times_out_with_none(engine: Engine) -> None:
    @engine.workflow("impatient")
    async def impatient(ctx: WorkflowContext, data: Any) -> str:
        req = await ctx.wait_for_update("q", timeout="200ms")
        return "none" if req is None else "got one"

    async with engine:
        run_id = await engine.start("impatient")
        assert await engine.result(run_id, timeout=30) == "none"


async def test_bad_input_raises_and_stores_nothing(engine: Engine, store: Store) -> None:
    @engine.workflow("strict")
    async def strict(ctx: WorkflowContext, data: Any) -> list[str]:
        caught = []
        for name in ("", 3):
            try:
                await ctx.wait_for_update(name)  # type: ignore[arg-type]
            except InvalidNameError as exc:
                caught.append(str(exc))
        req = await ctx.wait_for_update("q")
        assert req is not None
        for answer in (lambda: req.reply(object()), lambda: req.reject(42)):  # type: ignore[arg-type]
            try:
                await answer()
            except (NotSerializableError, InvalidOptionError) as exc:
                caught.append(type(exc).__name__)
        await req.reply("fine")
        return caught

    async with engine:
        run_id = await engine.start("strict")
        for name in ("", None, 7):
            with pytest.raises(InvalidNameError, match="update name"):
                await engine.update(run_id, name, 1)  # type: ignore[arg-type]
        with pytest.raises(InvalidNameError, match="update id"):
            await engine.update(run_id, "q", 1, update_id="")
        with pytest.raises(NotSerializableError, match="payload of update 'q'"):
            await engine.update(run_id, "q", {"f": object()})
        assert await store.list_updates(run_id, pending=False) == []
        assert await engine.update(run_id, "q", 1, timeout=30) == "fine"
        empty, not_str, not_json, not_reason = await engine.result(run_id, timeout=30)
        assert empty.startswith("update name") and "string" in not_str
        assert (not_json, not_reason) == ("NotSerializableError", "InvalidOptionError")


async def test_a_bare_client_sends_updates_to_a_worker(make_engine: Callable[..., Engine]) -> None:
    worker, client = make_engine(), make_engine()
    register_shipping(worker)
    async with worker:
        run_id = await worker.start("shipping")
        assert await client.update(run_id, "change-address", {"to": "X"}, timeout=30) == {
            "ok": True,
            "to": "X",
        }
        await client.update(run_id, "change-address", {"to": "ship"}, timeout=30)
        assert await client.result(run_id, timeout=30) == "X"


async def test_callers_poll_where_the_server_has_no_change_stream(mongoeco_uri: str) -> None:
    store = await mongo_store(mongoeco_uri)
    worker, client = Engine(store, lease_ttl="5s"), Engine(store)
    register_shipping(worker)
    try:
        async with worker:
            run_id = await worker.start("shipping")
            answer = await client.update(run_id, "change-address", {"to": "Y"}, timeout=30)
            assert answer == {"ok": True, "to": "Y"}
    finally:
        await store.close()
