"""Streams and heartbeats in one process, on both stores (docs/guides/streams.md)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from engine_core import (
    Engine,
    RunNotFoundError,
    StreamEntry,
    StreamTooLargeError,
    WorkflowContext,
    current_step,
)
from engine_core.errors import EngineError, StreamClosedError
from engine_core.streams import STREAM_MAX_ENTRY_BYTES
from tests.conftest import mongo_store


async def _all(engine: Engine, run_id: str, key: str, **options: Any) -> list[StreamEntry]:
    return [entry async for entry in engine.read_stream(run_id, key, timeout=30, **options)]


async def test_body_writes_are_exactly_once_across_replays(engine: Engine) -> None:
    @engine.workflow("progress")
    async def progress(ctx: WorkflowContext, data: Any) -> str:
        await ctx.write_stream("progress", {"done": 0})
        await ctx.step("work", lambda: "x")
        await ctx.write_stream("progress", {"done": 1})
        await ctx.wait_for_event("more")  # the pass parks; the next replays from the top
        await ctx.write_stream("progress", {"done": 2})
        await ctx.close_stream("progress")
        return "done"

    async with engine:
        run_id = await engine.start("progress")
        readers = [asyncio.create_task(_all(engine, run_id, "progress")) for _ in range(3)]
        await asyncio.sleep(0.2)
        await engine.send_event(run_id, "more", None)
        assert await engine.result(run_id, timeout=30) == "done"
        for reader in readers:
            entries = await reader
            assert [e.value for e in entries] == [{"done": 0}, {"done": 1}, {"done": 2}]
            assert [e.position for e in entries] == [0, 1, 2]
        assert await engine.store.stream_length(run_id, "progress") == 4  # and the close
        tail = await _all(engine, run_id, "progress", offset=2)
        assert [e.value for e in tail] == [{"done": 2}]


async def test_a_stream_ends_for_its_readers_when_the_run_ends(engine: Engine) -> None:
    @engine.workflow("open-ended")
    async def open_ended(ctx: WorkflowContext, data: Any) -> None:
        await ctx.write_stream("s", 1)
        await ctx.sleep("nap", "200ms")
        await ctx.write_stream("s", 2)

    async with engine:
        run_id = await engine.start("open-ended")
        assert [e.value for e in await _all(engine, run_id, "s")] == [1, 2]
        assert [e.value for e in await _all(engine, run_id, "never-written")] == []


async def test_step_writes_are_tagged_by_attempt_and_heartbeats_reach_the_next(
    engine: Engine,
) -> None:
    async def flaky() -> Any:
        info = current_step()
        assert info is not None
        before = info.last_heartbeat
        await info.write_stream("tokens", f"a{info.attempt}")
        await info.write_stream("tokens", f"b{info.attempt}")
        await info.heartbeat({"page": 40 + info.attempt})
        if info.attempt == 1:
            raise RuntimeError("first attempt fails")
        return before

    @engine.workflow("tagged")
    async def tagged(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.step("llm", flaky, retries=1)

    async with engine:
        run_id = await engine.start("tagged")
        assert await engine.result(run_id, timeout=30) == {"page": 41}
        entries = await _all(engine, run_id, "tokens")
        assert [(e.step, e.attempt, e.n, e.value) for e in entries] == [
            ("llm", 1, 0, "a1"),
            ("llm", 1, 1, "b1"),
            ("llm", 2, 0, "a2"),
            ("llm", 2, 1, "b2"),
        ]


async def test_a_dispatched_step_heartbeat_keeps_its_details(engine: Engine) -> None:
    @engine.step_function("pages")
    async def pages(payload: Any) -> Any:
        info = current_step()
        assert info is not None
        await info.heartbeat({"page": 41})
        await info.write_stream("out", payload)
        return info.last_heartbeat

    @engine.workflow("dispatcher")
    async def dispatcher(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.dispatch("p", "pages", "hello")

    async with engine:
        run_id = await engine.start("dispatcher")
        assert await engine.result(run_id, timeout=30) is None  # a first attempt
        assert await engine.store.get_heartbeat(run_id, "p") == (1, {"page": 41})
        assert [e.value for e in await _all(engine, run_id, "out")] == ["hello"]


async def test_limits_and_misuse_raise_errors_that_say_what_to_do(engine: Engine) -> None:
    @engine.workflow("misuse")
    async def misuse(ctx: WorkflowContext, data: Any) -> list[str]:
        caught = []
        try:
            await ctx.write_stream("big", "x" * (STREAM_MAX_ENTRY_BYTES + 1))
        except StreamTooLargeError as exc:
            caught.append(str(exc))
        await ctx.close_stream("done")
        try:
            await ctx.write_stream("done", 1)
        except StreamClosedError as exc:
            caught.append(str(exc))
        return caught

    async with engine:
        run_id = await engine.start("misuse")
        too_large, closed = await engine.result(run_id, timeout=30)
        assert "at most" in too_large and "split" in too_large
        assert "closed" in closed and "another stream" in closed
        assert issubclass(StreamTooLargeError, EngineError)
        assert await _all(engine, run_id, "big") == []
        with pytest.raises(RunNotFoundError):
            await _all(engine, "no-such-run", "s")
        with pytest.raises(RuntimeError, match="inside the step attempt"):
            from engine_core import StepInfo

            await StepInfo("r", "s", 1, "k").write_stream("s", 1)


async def test_a_reader_times_out_on_a_stream_that_does_not_end(engine: Engine) -> None:
    @engine.workflow("waiter")
    async def waiter(ctx: WorkflowContext, data: Any) -> Any:
        await ctx.write_stream("s", "first")
        return await ctx.wait_for_event("never")

    async with engine:
        run_id = await engine.start("waiter")
        seen = []
        with pytest.raises(TimeoutError):
            async for entry in engine.read_stream(run_id, "s", timeout=0.5):
                seen.append(entry.value)
        assert seen == ["first"]
        await engine.cancel(run_id)


async def test_deleting_finished_runs_removes_their_streams(engine: Engine) -> None:
    @engine.workflow("short")
    async def short(ctx: WorkflowContext, data: Any) -> None:
        await ctx.write_stream("s", 1)

    async with engine:
        run_id = await engine.start("short")
        await engine.result(run_id, timeout=30)
        assert await engine.delete_finished_runs(0) == 1
        assert await engine.store.stream_length(run_id, "s") == 0


async def test_readers_poll_where_the_server_has_no_change_stream(mongoeco_uri: str) -> None:
    store = await mongo_store(mongoeco_uri)
    engine = Engine(store, lease_ttl="5s")

    @engine.workflow("ticker")
    async def ticker(ctx: WorkflowContext, data: Any) -> None:
        for i in range(3):
            await ctx.write_stream("t", i)
            await ctx.sleep(f"nap-{i}", "100ms")
        await ctx.close_stream("t")

    try:
        async with engine:
            run_id = await engine.start("ticker")
            readers = [asyncio.create_task(_all(engine, run_id, "t")) for _ in range(2)]
            for reader in readers:
                assert [e.value for e in await reader] == [0, 1, 2]
    finally:
        await store.close()
