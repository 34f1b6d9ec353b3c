"""The second tier of flow control through the public API, on both stores (and with
targeted polling): debounced starts, ``on_duplicate``, ``key_rate`` and fair queues,
and the errors bad values get (docs/guides/flow-control.md)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from engine_core import (
    DuplicateRunError,
    Engine,
    InvalidDurationError,
    InvalidLimitError,
    InvalidOptionError,
    WorkflowContext,
    WorkflowRunCancelledError,
)
from engine_core.store import Store
from tests.conftest import open_store
from tests.support.waiting import reaches, wait_run


@pytest.fixture(params=["memory", "mongo", "mongo-targeted"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    made = await open_store(request)
    yield made
    await made.close()


def fast(store: Store) -> Engine:
    """An engine whose sweeps come often (a debounced run started elsewhere is found)."""
    return Engine(store, lease_ttl="5s", recovery_interval="200ms")


def register_echo(engine: Engine, began: dict[str, float] | None = None) -> None:
    @engine.workflow("echo")
    async def echo(ctx: WorkflowContext, data: Any) -> Any:
        if began is not None:
            began.setdefault(ctx.run_id, time.monotonic())
        return await ctx.step("echo", lambda: data)


async def runs_of(engine: Engine, workflow: str) -> list[str]:
    return [r.run_id for r in await engine.list_runs(workflow=workflow, limit=1000)]


# ---- debounce ---------------------------------------------------------------------


async def test_debounced_starts_make_one_run_with_the_last_input(store: Store) -> None:
    engine = fast(store)
    register_echo(engine)
    async with engine:
        ids = [
            await engine.start("echo", n, debounce_key="doc-7", debounce="300ms") for n in range(5)
        ]
        assert len(set(ids)) == 1
        assert (await engine.status(ids[0])).status == "queued"
        assert await engine.result(ids[0], timeout=10) == 4
        assert await runs_of(engine, "echo") == ids[:1]
        # The window ended with its run: the next start makes another.
        again = await engine.start("echo", "x", debounce_key="doc-7", debounce="100ms")
        other = await engine.start("echo", "y", debounce_key="doc-8", debounce="100ms")
        assert len({again, other, ids[0]}) == 3
        assert await engine.result(again, timeout=10) == "x"
        assert await engine.result(other, timeout=10) == "y"


async def test_a_debounce_timeout_bounds_the_wait(store: Store) -> None:
    engine = fast(store)
    began: dict[str, float] = {}
    register_echo(engine, began)
    async with engine:
        first_start = time.monotonic()
        returned: dict[str, list[int]] = {}
        for n in range(20):  # a start every 100 ms: never quiet for 400 ms
            run_id = await engine.start(
                "echo", n, debounce_key="k", debounce="400ms", debounce_timeout="1s"
            )
            returned.setdefault(run_id, []).append(n)
            await asyncio.sleep(0.1)
        outputs = {r: await engine.result(r, timeout=10) for r in returned}
    assert len(returned) >= 2  # the timeout closed windows while the starts went on
    first = next(iter(returned))
    assert began[first] - first_start < 3.0  # not held back by the 2 s of starts
    # Each run ran with the last input of the starts that joined it.
    assert outputs == {r: inputs[-1] for r, inputs in returned.items()}


async def test_a_pending_debounced_run_can_be_cancelled(store: Store) -> None:
    engine = fast(store)
    register_echo(engine)
    async with engine:
        run_id = await engine.start("echo", 1, debounce_key="k", debounce="1m")
        await engine.cancel(run_id)
        assert (await engine.status(run_id)).status == "cancelled"
        with pytest.raises(WorkflowRunCancelledError):
            await engine.result(run_id, timeout=5)
        fresh = await engine.start("echo", 2, debounce_key="k", debounce="100ms")
        assert fresh != run_id
        assert await engine.result(fresh, timeout=10) == 2


async def test_a_debounced_run_joins_its_queue_when_released(store: Store) -> None:
    engine = fast(store)
    register_echo(engine)
    engine.queue("fair", concurrency=1, fairness="key")
    async with engine:
        run_id = await engine.start(
            "echo", "a", queue="fair", key="t1", debounce_key="k", debounce="100ms"
        )
        same = await engine.start(
            "echo", "b", queue="fair", key="t1", debounce_key="k", debounce="100ms"
        )
        assert same == run_id
        assert await engine.result(run_id, timeout=10) == "b"


async def test_a_debounced_start_from_a_client_is_released_by_the_fleet(store: Store) -> None:
    worker = fast(store)
    register_echo(worker)
    client = Engine(store)
    register_echo(client)
    async with worker:
        run_id = await client.start("echo", 1, debounce_key="k", debounce="100ms")
        assert await client.start("echo", 2, debounce_key="k", debounce="100ms") == run_id
        assert await worker.result(run_id, timeout=10) == 2


# ---- on_duplicate -----------------------------------------------------------------


def register_waiter(engine: Engine) -> None:
    @engine.workflow("sub")
    async def sub(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("go", timeout="1m")

    @engine.workflow("parent")
    async def parent(ctx: WorkflowContext, data: Any) -> Any:
        await ctx.child("sub", "sub", data)
        return data


async def test_on_duplicate_return_gives_the_holder_and_records_nothing(store: Store) -> None:
    engine = fast(store)
    register_waiter(engine)
    async with engine:
        holder = await engine.start("sub", 1, dedup_id="d")
        again = await engine.start("sub", 2, dedup_id="d", on_duplicate="return")
        assert again == holder
        assert await runs_of(engine, "sub") == [holder]
        with pytest.raises(DuplicateRunError) as raised:
            await engine.start("sub", 3, dedup_id="d")  # "raise", the default
        assert raised.value.run_id == holder
        await engine.cancel(holder)


async def test_on_duplicate_cancel_replaces_the_holder_and_its_children(store: Store) -> None:
    engine = fast(store)
    register_waiter(engine)
    async with engine:
        holder = await engine.start("parent", "old", dedup_id="d")
        for _ in range(200):
            if await engine.list_children(holder):
                break
            await asyncio.sleep(0.02)
        [child] = await engine.list_children(holder)
        new = await engine.start("parent", "new", dedup_id="d", on_duplicate="cancel")
        assert new != holder
        old = await engine.status(holder)
        assert old.status == "cancelled" and old.error is not None
        assert new in old.error["message"]
        assert (await engine.status(child.run_id)).status == "cancelled"
        for _ in range(200):
            children = await engine.list_children(new)
            if children:
                break
            await asyncio.sleep(0.02)
        await engine.send_event(children[0].run_id, "go", None)
        assert await engine.result(new, timeout=10) == "new"


async def test_concurrent_cancel_starts_leave_one_live_run(store: Store) -> None:
    engine = fast(store)
    register_waiter(engine)
    async with engine:
        ids = await asyncio.gather(
            *(engine.start("sub", n, dedup_id="d", on_duplicate="cancel") for n in range(8))
        )
        statuses = {r: (await engine.status(r)).status for r in ids}
        live = [r for r, s in statuses.items() if s != "cancelled"]
        assert len(live) == 1, statuses
        await engine.cancel(live[0])


async def test_on_duplicate_cancel_refuses_a_holder_that_is_compensating(store: Store) -> None:
    engine = fast(store)
    gate = asyncio.Event()

    async def undo(*_: Any) -> None:
        await gate.wait()

    @engine.workflow("undone")
    async def undone(ctx: WorkflowContext, data: Any) -> Any:
        await ctx.step("do", lambda: 1, compensate=undo)
        return await ctx.wait_for_event("go", timeout="1m")

    async with engine:
        holder = await engine.start("undone", 1, dedup_id="d")
        await reaches(engine, holder, "go")
        await engine.cancel(holder, compensate=True)
        assert (await engine.status(holder)).status == "compensating"
        with pytest.raises(DuplicateRunError, match="compensating") as raised:
            await engine.start("undone", 2, dedup_id="d", on_duplicate="cancel")
        assert raised.value.run_id == holder
        assert await runs_of(engine, "undone") == [holder]  # recorded nothing
        gate.set()
        await wait_run(engine, holder, "compensated")
        new = await engine.start("undone", 3, dedup_id="d", on_duplicate="cancel")
        assert new != holder and (await engine.status(new)).status != "cancelled"
        await engine.cancel(new)


# ---- key_rate and fairness ----------------------------------------------------------


def register_logged(engine: Engine, log: list[tuple[str | None, float]]) -> None:
    @engine.workflow("logged")
    async def logged(ctx: WorkflowContext, data: Any) -> Any:
        if not any(data["n"] == n for n, _ in log):
            log.append((data["n"], time.monotonic()))
        return await ctx.step("s", lambda: data["key"])


async def test_key_rate_spaces_the_admissions_of_each_key(store: Store) -> None:
    log: list[tuple[Any, float]] = []
    engine = fast(store)
    register_logged(engine, log)
    engine.queue("per-tenant", key_rate="2/1s")
    client = Engine(store)
    register_logged(client, [])
    client.queue("per-tenant", key_rate="2/1s")
    ids = [
        await client.start("logged", {"n": f"a{n}", "key": "a"}, queue="per-tenant", key="a")
        for n in range(5)
    ] + [
        await client.start("logged", {"n": f"b{n}", "key": "b"}, queue="per-tenant", key="b")
        for n in range(2)
    ]
    async with engine:
        await asyncio.gather(*(engine.result(r, timeout=30) for r in ids))
    a_times = sorted(t for n, t in log if n.startswith("a"))
    first_b = min(t for n, t in log if n.startswith("b"))
    assert first_b - a_times[0] < 0.9  # key b does not wait out key a's window (1 s)
    # 2 of key a, 2 more a window later, the fifth a window after that.
    assert a_times[-1] - a_times[0] >= 1.5
    assert all(a_times[i + 2] - a_times[i] >= 0.5 for i in range(len(a_times) - 2))


@pytest.mark.parametrize("limit", [{"key_rate": "1/1h"}, {"key_concurrency": 1}])
async def test_a_key_at_its_limit_does_not_hold_back_keys_behind_a_full_page(
    store: Store, limit: dict[str, Any]
) -> None:
    engines = fast(store), Engine(store)
    for engine in engines:
        register_waiter(engine)  # "sub" waits for an event: an admitted run holds its key
        engine.queue("busy-first", **limit)
    worker, client = engines
    # More runs of the busy key than one round reads (BATCH), all started first.
    busy = [await client.start("sub", n, queue="busy-first", key="busy") for n in range(150)]
    other = await client.start("sub", "other", queue="busy-first", key="other")
    async with worker:
        await wait_run(worker, other, "running")
        statuses = [(await worker.status(r)).status for r in busy]
    assert statuses.count("queued") == 149  # the busy key's limit still holds


async def test_a_fair_queue_takes_the_keys_in_turn(store: Store) -> None:
    log: list[tuple[Any, float]] = []
    engine = fast(store)
    register_logged(engine, log)
    engine.queue("shared", concurrency=1, fairness="key")
    client = Engine(store)
    register_logged(client, [])
    client.queue("shared", concurrency=1, fairness="key")
    ids = []
    for n in range(8):  # the busy tenant started all of its runs first
        ids.append(await client.start("logged", {"n": f"busy{n}", "key": "busy"},
                                      queue="shared", key="busy"))  # fmt: skip
    for key in ("x", "y"):
        for n in range(2):
            ids.append(await client.start("logged", {"n": f"{key}{n}", "key": key},
                                          queue="shared", key=key))  # fmt: skip
    async with engine:
        await asyncio.gather(*(engine.result(r, timeout=30) for r in ids))
    order = [n for n, _ in sorted(log, key=lambda e: e[1])]
    assert order[:6] == ["busy0", "x0", "y0", "busy1", "x1", "y1"]
    figures = {q.name: q for q in await client.list_queues()}
    assert figures["shared"].fairness == "key" and figures["shared"].keys_waiting == 0


async def test_queue_figures_show_the_new_limits_and_the_keys_waiting(store: Store) -> None:
    client = Engine(store)
    register_echo(client)
    client.queue("fair", key_rate="10/1m", fairness="key")
    for n in range(5):
        await client.start("echo", n, queue="fair", key="a" if n < 3 else None)
    [fair] = await client.list_queues()
    assert (fair.key_rate, fair.fairness, fair.queued) == ("10/60s", "key", 5)
    assert fair.keys_waiting == 2 and fair.top_waiting_keys == (("a", 3), (None, 2))


# ---- bad values -------------------------------------------------------------------


async def test_bad_values_raise_naming_the_argument_and_record_nothing(store: Store) -> None:
    engine = Engine(store)
    register_echo(engine)
    with pytest.raises(InvalidLimitError, match="key_rate"):
        engine.queue("q", key_rate="x/1m")
    with pytest.raises(InvalidOptionError, match="fairness"):
        engine.queue("q", fairness="tenant")
    assert await engine.list_queues() == []
    engine.queue("q")
    bad: list[tuple[type[Exception], str, dict[str, Any]]] = [
        (InvalidOptionError, "on_duplicate", {"dedup_id": "d", "on_duplicate": "maybe"}),
        (InvalidOptionError, "dedup_id", {"on_duplicate": "return"}),
        (InvalidOptionError, "debounce_key", {"debounce": "5s"}),
        (InvalidOptionError, "debounce_key", {"debounce_timeout": "5s"}),
        (InvalidOptionError, "debounce", {"debounce_key": "k"}),
        (InvalidOptionError, "debounce_timeout",
         {"debounce_key": "k", "debounce": "5s", "debounce_timeout": "1s"}),
        (InvalidDurationError, "debounce", {"debounce_key": "k", "debounce": "soon"}),
        (InvalidOptionError, "run_id", {"debounce_key": "k", "debounce": "1s", "run_id": "r"}),
        (InvalidOptionError, "dedup_id", {"debounce_key": "k", "debounce": "1s", "dedup_id": "d"}),
        (InvalidOptionError, "delay", {"debounce_key": "k", "debounce": "1s", "delay": "1s"}),
    ]  # fmt: skip
    for error, named, options in bad:
        with pytest.raises(error, match=named):
            await engine.start("echo", 1, queue="q", **options)
        assert issubclass(error, ValueError)
    assert await runs_of(engine, "echo") == []
