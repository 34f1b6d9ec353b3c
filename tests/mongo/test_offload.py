"""Values past ``offload_over`` in GridFS (docs/guides/data-at-rest.md): a 20 MB step
result and a fan-out of 50 x 300 KB complete with no document over about 1 MiB, read
back whole where a read needs them and left where they are by a list; deleted with their
run; ``max_value`` refusing a larger value where it is made; sizes checked at
construction."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

import bson
import pytest

from engine_core import (
    Engine,
    InvalidOptionError,
    StepFailedError,
    ValueTooLargeError,
    WorkflowContext,
    current_step,
)
from engine_core.codecs import AesGcmCodec
from engine_core.codecs.apart import stored_bytes
from engine_core.codecs.sealed_store import SealedStore
from engine_core.testing.builders import begin, done_step, make_run
from pikku_mongo import MongoStore
from pikku_mongo.wire.encoding import Offloaded
from tests.conftest import mongo_store
from tests.support.sent_commands import SentCommands
from tests.support.stored_documents import stored_documents

MB = 1000 * 1000
MIB = 1024 * 1024


#: A store and the commands its client sent.
Listened = tuple[MongoStore, SentCommands]


@pytest.fixture(params=["nx", "mongoeco"])
async def listened(
    request: pytest.FixtureRequest,
) -> AsyncIterator[Listened]:
    commands = SentCommands()
    store = await mongo_store(
        request.getfixturevalue(f"{request.param}_uri"), event_listeners=[commands]
    )
    yield store, commands
    await store.close()


async def largest_document(store: MongoStore) -> tuple[int, str]:
    """The size of the largest document in any collection of the store's database."""
    largest = (0, "")
    async for name, doc in stored_documents(store):
        largest = max(largest, (len(bson.encode(doc)), name))
    return largest


def report(size: int) -> str:
    return "r" * size


def register(engine: Engine) -> None:
    @engine.workflow("big-report")
    async def big_report(ctx: WorkflowContext, size: int) -> int:
        text = await ctx.step("report", report, size)
        await ctx.sleep("nap", "10ms")  # a replay reads the offloaded result back
        return len(text)

    @engine.workflow("fan-out")
    async def fan_out(ctx: WorkflowContext, data: Any) -> list[int]:
        parts = await asyncio.gather(
            *(ctx.step(f"part-{i}", report, 300_000 + i) for i in range(50))
        )
        return [len(p) for p in parts]


@pytest.mark.parametrize("codec", [None, AesGcmCodec(keys={"k": os.urandom(32)}, current="k")])
async def test_a_20_mb_result_and_a_wide_fan_out_keep_documents_small(
    listened: Listened, codec: AesGcmCodec | None
) -> None:
    store, _ = listened
    engine = Engine(store, codec=codec, lease_ttl="10s")
    register(engine)
    async with engine:
        big = await engine.start("big-report", 20 * MB)
        assert await engine.result(big, timeout=120) == 20 * MB
        wide = await engine.start("fan-out")
        assert await engine.result(wide, timeout=120) == [300_000 + i for i in range(50)]
        status = await engine.status(big)
        assert status.steps["report"].result == report(20 * MB)
    size, where = await largest_document(store)
    assert size <= 1.1 * MIB, (size, where)
    files = await store.value_files.find({}).to_list()
    assert len(files) == 1 and files[0]["length"] >= 20 * MB
    # A list leaves the value where it is: shown, not read.
    listed = await engine.list_runs()
    assert {r.run_id for r in listed} == {big, wide}


async def test_a_list_leaves_values_in_gridfs_and_reads_fetch_them(
    listened: Listened,
) -> None:
    store, commands = listened
    engine = Engine(store, lease_ttl="10s")

    @engine.workflow("echo")
    async def echo(ctx: WorkflowContext, data: str) -> int:
        return len(data)

    async with engine:
        run_id = await engine.start("echo", "x" * (2 * MIB))
        assert await engine.result(run_id, timeout=60) == 2 * MIB
    commands.sent.clear()
    (listed,) = await engine.list_runs()
    assert isinstance(listed.input, Offloaded) and listed.input.startswith("offloaded (")
    assert not any("offloaded" in collection for _, collection in commands.sent)
    assert (await engine.status(run_id)).input == "x" * (2 * MIB)


async def test_a_value_costs_gridfs_chunks_and_one_command_more(
    listened: Listened,
) -> None:
    """At the engine's seam (what a pass calls to record a step's outcome): a value under
    ``offload_over`` adds no command; a 20 MB one adds one insert of its chunks and one
    of its file document, and its reference rides the step's own write."""
    store, commands = listened
    sealed = SealedStore(store, None)
    sent: dict[int, list[tuple[str, str]]] = {}
    for size in (100, 20 * MB):
        run_id = f"run-{size}"
        await sealed.insert_run(make_run(run_id))
        token = await begin(sealed, run_id)
        commands.sent.clear()
        outcome = done_step(run_id, "report", result=report(size))
        assert await sealed.record_steps(
            run_id, token=token, status="running", outcomes=[outcome], done=["report"]
        )
        sent[size] = [c for c in commands.sent if c[1] != "pikku_leases"]
        run = await sealed.get_run(run_id)
        assert run is not None
        kept = {s.key: s for s in await sealed.load_steps(run_id)} | run.journal
        assert kept["report"].result == report(size)  # read back whole
    small, large = sent[100], sent[20 * MB]
    assert not any("offloaded" in collection for _, collection in small)
    assert [c for c in large if "offloaded" in c[1]] == [
        ("insert", "pikku_offloaded.chunks"),
        ("insert", "pikku_offloaded.files"),
    ]
    assert [c for c in large if "offloaded" not in c[1]] == small


async def test_offloaded_values_go_with_their_run(
    listened: Listened,
) -> None:
    store, _ = listened
    engine = Engine(store, lease_ttl="10s")
    register(engine)
    async with engine:
        run_id = await engine.start("big-report", 2 * MIB)
        await engine.result(run_id, timeout=60)
        (file,) = await store.value_files.find({}).to_list()
        assert await store.value_chunks.find({"files_id": file["_id"]}).to_list()
        assert await engine.delete_finished_runs("0s") == 1
    assert await store.value_files.find({}).to_list() == []
    # (nx-27017 finds GridFS chunks by their file only)
    assert await store.value_chunks.find({"files_id": file["_id"]}).to_list() == []


async def test_offloaded_values_expire_with_their_run(
    listened: Listened,
) -> None:
    """Retention's sweep (the test servers run no TTL monitor) deletes a run's files in
    GridFS with it."""
    store, _ = listened
    engine = Engine(store, lease_ttl="10s")

    @engine.workflow("kept-briefly", retention="300ms")
    async def kept_briefly(ctx: WorkflowContext, data: Any) -> int:
        return len(await ctx.step("report", report, 2 * MIB))

    async with engine:
        run_id = await engine.start("kept-briefly", "i" * (2 * MIB))
        assert await engine.result(run_id, timeout=60) == 2 * MIB
        files = await store.value_files.find({}).to_list()
        assert len(files) == 2  # the input and the step's result
        await asyncio.sleep(0.4)
        assert (await engine.recover()).expired == 1
    assert await store.value_files.find({}).to_list() == []
    for file in files:
        assert await store.value_chunks.find({"files_id": file["_id"]}).to_list() == []


async def test_a_start_that_finds_its_run_leaves_no_value_behind(
    listened: Listened,
) -> None:
    store, _ = listened
    engine = Engine(store, lease_ttl="10s")
    register(engine)
    run_id = await engine.start("fan-out", 10, run_id="once")
    assert await engine.start("fan-out", "y" * (2 * MIB), run_id="once") == run_id
    assert await store.value_files.find({}).to_list() == []


async def test_a_value_past_max_value_raises_where_it_is_made(nx_uri: str) -> None:
    store = await mongo_store(nx_uri, offload_over="1MiB", max_value="2MiB")
    engine = Engine(store, lease_ttl="10s")
    too_big = "z" * (3 * MIB)

    @engine.step_function("take")
    async def take(payload: str) -> int:
        return len(payload)

    @engine.workflow("makes-too-much")
    async def makes_too_much(ctx: WorkflowContext, data: Any) -> list[str]:
        seen = []
        try:
            await ctx.step("huge", lambda: too_big, retries=3)
        except StepFailedError as exc:
            seen.append(f"{exc.error_type} after {exc.attempts}")
        try:
            await ctx.dispatch("send", "take", too_big)
        except ValueTooLargeError:
            seen.append("dispatch refused")
        return seen

    @engine.workflow("waits")
    async def waits(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("late", timeout="60s")

    async with engine:
        waiting = await engine.start("waits")
        with pytest.raises(ValueTooLargeError, match="over the store's limit") as raised:
            await engine.start("makes-too-much", too_big)
        assert isinstance(raised.value, ValueError)
        run_id = await engine.start("makes-too-much")
        assert await engine.result(run_id, timeout=60) == [
            "ValueTooLargeError after 1",
            "dispatch refused",
        ]
        with pytest.raises(ValueTooLargeError):
            await engine.send_event(waiting, "late", too_big)
        await engine.send_event(waiting, "late", "small")
        assert await engine.result(waiting, timeout=60) == "small"
    await store.close()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"offload_over": "9MiB"}, "offload_over must be from 1KiB to 8MiB"),
        ({"offload_over": "lots"}, "is not a size"),
        ({"offload_over": 1.5}, "must be a number of bytes"),
        ({"offload_over": "2MiB", "max_value": "1MiB"}, "max_value must be from offload_over"),
        ({"max_value": "3GiB"}, "max_value must be from"),
    ],
)
async def test_bad_sizes_raise_at_construction(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidOptionError, match=message) as raised:
        MongoStore.from_uri("mongodb://127.0.0.1:1/db", **options)
    assert isinstance(raised.value, ValueError)
    from pymongo import AsyncMongoClient

    client: AsyncMongoClient[Any] = AsyncMongoClient("mongodb://127.0.0.1:1", connect=False)
    with pytest.raises(InvalidOptionError, match=message):
        MongoStore(client["db"], **options)
    await client.close()


def test_a_value_is_sized_as_it_is_stored() -> None:
    """As JSON text, ASCII-escaped: a character past U+FFFF takes 12 bytes, so a string of
    them goes to GridFS at a twelfth of the limit in characters."""
    assert stored_bytes("\U0001f600" * 100, 1024) == 1202 > 1024
    assert stored_bytes("é" * 100, 1024) == 602
    assert stored_bytes("a" * 80, 1024) == 82
    assert stored_bytes(b"\x00" * 2000, 1024) == 2000


async def test_a_heartbeat_replaced_leaves_no_value_behind(
    listened: Listened,
) -> None:
    """Heartbeats repeat: large details kept in GridFS are dropped when the next heartbeat
    of the step replaces them, so a step that beats often keeps one file, not one a beat."""
    store, _ = listened
    engine = Engine(store, lease_ttl="10s")

    async def beats() -> str:
        info = current_step()
        assert info is not None
        for n in range(4):
            await info.heartbeat({"n": n, "state": report(2 * MIB)})
        return "done"

    @engine.workflow("beats")
    async def beating(ctx: WorkflowContext, data: Any) -> str:
        return await ctx.step("beat", beats)

    async with engine:
        run_id = await engine.start("beats")
        assert await engine.result(run_id, timeout=60) == "done"
    assert len(await store.value_files.find({}).to_list()) == 1  # the last beat's
    held = await engine.store.get_heartbeat(run_id, "beat")
    assert held is not None and held[1]["n"] == 3 and held[1]["state"] == report(2 * MIB)


async def test_each_large_outcome_is_kept_apart_once(
    listened: Listened,
) -> None:
    """Outcomes past the limit, in a fan-out and one after another, through the journal
    and on to their step records and a replay: one file each, never written twice."""
    store, _ = listened
    engine = Engine(store, lease_ttl="10s")

    @engine.workflow("wide")
    async def wide(ctx: WorkflowContext, data: Any) -> int:
        parts = await asyncio.gather(
            *(ctx.step(f"p-{i}", report, MIB + 1000 + i) for i in range(20))
        )
        more = [await ctx.step(f"q-{i}", report, MIB + 5000 + i) for i in range(20)]
        await ctx.sleep("nap", "10ms")
        return sum(map(len, parts)) + sum(map(len, more))

    async with engine:
        run_id = await engine.start("wide")
        assert await engine.result(run_id, timeout=120) == 40 * MIB + 20 * 6000 + 2 * 190
        status = await engine.status(run_id)
    assert all(status.steps[f"q-{i}"].result == report(MIB + 5000 + i) for i in range(20))
    assert len(await store.value_files.find({}).to_list()) == 40
