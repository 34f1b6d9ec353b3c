"""The workloads on this project's engine, in this process: W1-W4, W5 on the in-memory
store, W6, and the raw ``find_one_and_update`` rate of the server.

Each function runs one repetition in a fresh engine on a fresh store (a new database on
MongoDB, dropped afterwards) and returns a :class:`~benchmarks.common.Measurement`.
Entering ``async with engine`` (index creation, the startup recovery pass) is not timed.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, cast

from pymongo import AsyncMongoClient, ReturnDocument

from benchmarks.common import (
    DISPATCH_WF,
    INLINE_WF,
    SLEEP_WF,
    CommandCounter,
    Measurement,
    StoreKind,
    drop_database,
    fresh_db_name,
    open_store,
    register_dispatch,
    register_inline,
    register_sleep,
    with_database,
)
from benchmarks.floor import metered
from engine_core import Engine
from engine_core.codecs import PayloadCodec
from engine_core.common.clock import utcnow
from engine_core.records import TERMINAL, RunRecord, StepPage, StepRecord
from engine_core.store import Store

RESULT_TIMEOUT = 900.0


def _counts(counter: CommandCounter | None) -> dict[str, int]:
    return counter.snapshot() if counter is not None else {}


def _reset(counter: CommandCounter | None) -> None:
    if counter is not None:
        counter.reset()


async def w1_sequential(
    kind: StoreKind,
    uri: str | None,
    runs: int,
    steps: int,
    held: int = 0,
    codec: PayloadCodec | None = None,
) -> Measurement:
    """W1: ``runs`` workflows of ``steps`` no-op inline steps, one after another; with
    ``held``, on a database that already holds that many steps of finished runs; with
    ``codec``, every value sealed by it (``Engine(codec=...)``)."""
    async with open_store(kind, uri, "w1") as (store, counter, _):
        if held:
            await hold_finished_steps(store, held)
        engine = Engine(store, codec=codec)
        register_inline(engine)
        async with engine:
            _reset(counter)
            began = time.perf_counter()
            with metered(counter) as meter:
                for _ in range(runs):
                    run_id = await engine.start(INLINE_WF, {"steps": steps})
                    await engine.result(run_id, timeout=RESULT_TIMEOUT)
            seconds = time.perf_counter() - began
            commands = _counts(counter)
    return Measurement(seconds, runs * steps, commands, meter.extra)


async def hold_finished_steps(store: Store, count: int, per_run: int = 10) -> None:
    """Fill the store with ``count`` steps of finished runs (``per_run`` each), in bulk on
    MongoDB (``insert_many`` of the store's own documents)."""
    now = utcnow()
    runs = [
        RunRecord(
            run_id=f"done-{r:07d}",
            workflow=INLINE_WF,
            status="completed",
            input=None,
            created_at=now,
            updated_at=now,
            output=per_run,
            pending_pass=False,
            passes=1,
        )
        for r in range(count // per_run)
    ]
    steps = [
        StepRecord(
            run_id=run.run_id,
            key=f"s{i}",
            kind="inline",
            status="succeeded",
            attempts=1,
            updated_at=now,
            ended_at=now,
        )
        for run in runs
        for i in range(per_run)
    ]
    runs_collection = getattr(store, "runs", None)
    if runs_collection is not None and hasattr(runs_collection, "insert_many"):
        from pikku_mongo.wire.documents import run_to_doc, step_to_doc

        await store.init()
        steps_collection = getattr(store, "steps")  # noqa: B009 - MongoStore's collection
        for at in range(0, len(runs), 1000):
            await runs_collection.insert_many([run_to_doc(r) for r in runs[at : at + 1000]])
        for at in range(0, len(steps), 5000):
            await steps_collection.insert_many([step_to_doc(s) for s in steps[at : at + 5000]])
        return
    for run in runs:
        await store.insert_run(run)
    await store.save_steps(steps)


async def w2_concurrent(kind: StoreKind, uri: str | None, runs: int, steps: int) -> Measurement:
    """W2: ``runs`` workflows of ``steps`` no-op inline steps, started together."""
    async with open_store(kind, uri, "w2") as (store, counter, _):
        engine = Engine(store)
        register_inline(engine)
        async with engine:
            _reset(counter)
            began = time.perf_counter()
            with metered(counter) as meter:
                run_ids = await asyncio.gather(
                    *(engine.start(INLINE_WF, {"steps": steps}) for _ in range(runs))
                )
                # Each run awaited by its own waiter, as a web app awaiting its runs would.
                await asyncio.gather(
                    *(engine.result(run_id, timeout=RESULT_TIMEOUT) for run_id in run_ids)
                )
            seconds = time.perf_counter() - began
            commands = _counts(counter)
    return Measurement(seconds, runs * steps, commands, meter.extra)


def growth(stamps: list[float], began: float) -> dict[str, float]:
    """Per-step time over the first and the last tenth of a run (medians, ms)."""
    times = [b - a for a, b in zip([began, *stamps[:-1]], stamps, strict=True)]
    tenth = max(1, len(times) // 10)
    first = statistics.median(times[:tenth]) * 1000
    last = statistics.median(times[-tenth:]) * 1000
    return {"first_ms": first, "last_ms": last, "growth": last / first if first else 0.0}


async def w3_long_run(
    kind: StoreKind, uri: str | None, steps: int, codec: PayloadCodec | None = None
) -> Measurement:
    """W3: one workflow of ``steps`` no-op inline steps; also how the per-step time of
    the last tenth of the run compares with the first tenth (``codec``: as in W1)."""
    stamps: list[float] = []
    async with open_store(kind, uri, "w3") as (store, counter, _):
        engine = Engine(store, codec=codec)
        register_inline(engine, stamps)
        async with engine:
            _reset(counter)
            began = time.perf_counter()
            with metered(counter) as meter:
                run_id = await engine.start(INLINE_WF, {"steps": steps})
                await engine.result(run_id, timeout=RESULT_TIMEOUT)
            seconds = time.perf_counter() - began
            commands = _counts(counter)
    return Measurement(seconds, steps, commands, {**growth(stamps, began), **meter.extra})


async def w4_sleepers(kind: StoreKind, uri: str | None, runs: int, sleep: float) -> Measurement:
    """W4: ``runs`` workflows started together, each a step, a durable sleep, a step.
    ``extra["overhead_s"]`` is the wall time beyond the sleep itself."""
    async with open_store(kind, uri, "w4") as (store, counter, _):
        engine = Engine(store)
        register_sleep(engine)
        async with engine:
            _reset(counter)
            began = time.perf_counter()
            run_ids = await asyncio.gather(
                *(engine.start(SLEEP_WF, {"sleep": sleep}) for _ in range(runs))
            )
            await asyncio.gather(
                *(engine.result(run_id, timeout=RESULT_TIMEOUT) for run_id in run_ids)
            )
            seconds = time.perf_counter() - began
            commands = _counts(counter)
    # Two inline steps and one sleep step per run.
    return Measurement(seconds, runs * 3, commands, {"overhead_s": seconds - sleep})


async def w5_in_process(kind: StoreKind, uri: str | None, runs: int, steps: int) -> Measurement:
    """W5 in one process that is its own worker: ``runs`` workflows of ``steps``
    sequential dispatched no-op steps, started together, each awaited with its own
    ``engine.result``."""
    async with open_store(kind, uri, "w5") as (store, counter, _):
        engine = Engine(store)
        register_dispatch(engine, steps_function=True)
        async with engine:
            _reset(counter)
            cpu = time.process_time()
            began = time.perf_counter()
            run_ids = await asyncio.gather(
                *(engine.start(DISPATCH_WF, {"steps": steps}) for _ in range(runs))
            )
            await asyncio.gather(
                *(engine.result(run_id, timeout=RESULT_TIMEOUT) for run_id in run_ids)
            )
            seconds = time.perf_counter() - began
            cpu = time.process_time() - cpu
            commands = _counts(counter)
    return Measurement(seconds, runs * steps, commands, {"cpu_s": cpu})


async def wait_terminal(store: Store, run_ids: list[str], poll: float = 0.01) -> None:
    """Until every run is terminal, reading one run at a time (a client's wait)."""
    deadline = time.monotonic() + RESULT_TIMEOUT
    for run_id in run_ids:
        while True:
            run = await store.get_run(run_id)
            if run is not None and run.status in TERMINAL:
                if run.status != "completed":
                    raise RuntimeError(f"run {run_id} ended {run.status}: {run.error}")
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} still {run and run.status}")
            await asyncio.sleep(poll)


# ---- W6: the recovery sweep ---------------------------------------------------------


#: W6 measures one recovery pass over N runs whose sleeps fell due while no process ran
#: ("due": each is owed a pass), and the startup pass of a serving engine over N sleeps
#: not yet due ("re-arm": each gets a timer for what remains of it).
W6_MODES = ("due", "re-arm")


def parked_step(i: int, base: Any, due: bool) -> StepRecord:
    """The sleep a parked run waits on: due an hour ago, or in an hour."""
    offset = timedelta(hours=-1 if due else 1, milliseconds=i)
    return StepRecord(
        run_id=f"parked-{i:07d}",
        key="nap",
        kind="sleep",
        status="scheduled",
        due_at=base + offset,
        scheduled_at=base,
        updated_at=base,
        timeout=3600.0,
    )


def parked_run(i: int, base: Any) -> RunRecord:
    return RunRecord(
        run_id=f"parked-{i:07d}",
        workflow=SLEEP_WF,
        status="running",
        input={"sleep": 3600},
        created_at=base,
        updated_at=base,
        pending_pass=False,
        passes=1,
        token=1,
    )


async def park(store: Store, count: int, due: bool, batch: int = 1000) -> float:
    """Insert ``count`` parked runs and their sleeps, in shuffled due order; returns the
    seconds taken. On MongoDB in bulk (``insert_many`` of the store's own documents),
    elsewhere through the store's inserts."""
    order = list(range(count))
    random.Random(count).shuffle(order)
    base = utcnow()
    began = time.perf_counter()
    steps_collection = getattr(store, "steps", None)
    if steps_collection is not None and hasattr(steps_collection, "insert_many"):
        from pikku_mongo.wire.documents import run_to_doc, step_to_doc

        runs_collection = getattr(store, "runs")  # noqa: B009 - MongoStore's collection
        for at in range(0, count, batch):
            chunk = order[at : at + batch]
            docs = [step_to_doc(parked_step(i, base, due)) for i in chunk]
            await steps_collection.insert_many(docs, ordered=False)
            await runs_collection.insert_many([run_to_doc(parked_run(i, base)) for i in chunk])
    else:
        for i in order:
            await store.insert_run(parked_run(i, base))
            await store.insert_step(parked_step(i, base, due))
    return time.perf_counter() - began


class _SweepCounter:
    """A store proxy that counts the scheduled steps a recovery sweep reads."""

    def __init__(self, store: Store, expected: int = 0) -> None:
        self._store = store
        self.visited = 0
        self.expected = expected
        self.all_visited = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def find_scheduled_steps(
        self, limit: int, after: StepPage | None = None
    ) -> list[StepRecord]:
        page = await self._store.find_scheduled_steps(limit, after)
        self.visited += len(page)
        if self.expected and self.visited >= self.expected:
            self.all_visited.set()
        await asyncio.sleep(0)  # a store that never yields (in-memory) can still time out
        return page


async def _startup_pass(engine: Engine, sweeper: _SweepCounter) -> float:
    """Seconds from entering ``async with engine`` until its startup recovery pass has
    visited every parked sleep (and armed a timer for each)."""
    began = time.perf_counter()
    await engine.__aenter__()
    try:
        await sweeper.all_visited.wait()
        return time.perf_counter() - began
    finally:
        await engine.__aexit__(None, None, None)


async def w6_sweeps(
    kind: StoreKind,
    uri: str | None,
    count: int,
    mode: str,
    reps: int,
    box: float,
    on_rep: Callable[[], None] | None = None,
) -> tuple[list[Measurement], float]:
    """W6 (see :data:`W6_MODES`) over ``count`` parked runs, ``reps`` times on the same
    parked runs, each time in a fresh engine. Returns the repetitions and the seconds
    parking took. A "due" pass that has not finished after ``box`` seconds is cancelled
    and its time estimated from the share of steps it visited (then it is the only
    repetition, marked ``extra["capped"]``)."""
    out: list[Measurement] = []
    async with open_store(kind, uri, f"w6_{count}") as (store, counter, _):
        parking = await park(store, count, due=mode == "due")
        await store.init()  # indexes after the bulk insert: quicker to build
        if on_rep is not None:
            on_rep()
        for rep in range(reps):
            sweeper = _SweepCounter(store, expected=count)
            engine = Engine(cast(Store, sweeper), recovery_interval="1h")
            register_sleep(engine)
            _reset(counter)
            if mode == "re-arm":
                seconds = await _startup_pass(engine, sweeper)
                if sweeper.visited != count:
                    raise RuntimeError(f"startup pass visited {sweeper.visited} of {count}")
                out.append(Measurement(seconds, count, _counts(counter)))
                if on_rep is not None:
                    on_rep()
                continue
            began = time.perf_counter()
            try:
                report = await asyncio.wait_for(
                    engine.recover(startup=True), box if rep == 0 else None
                )
            except TimeoutError:
                elapsed = time.perf_counter() - began
                visited = max(1, sweeper.visited)
                extra = {"capped": 1.0, "visited": float(visited), "box_s": elapsed}
                extra["parked"] = float(count)
                out.append(Measurement(elapsed * count / visited, visited, _counts(counter)))
                if on_rep is not None:
                    on_rep()
                break
            seconds = time.perf_counter() - began
            if report.skipped or report.woken != count or sweeper.visited != count:
                raise RuntimeError(f"unexpected sweep: {report}, {sweeper.visited} visited")
            out.append(Measurement(seconds, count, _counts(counter)))
            if on_rep is not None:
                on_rep()
    return out, parking


# ---- the server's own rate ----------------------------------------------------------


async def raw_find_one_and_update(base_uri: str, ops: int, parallel: int = 1) -> Measurement:
    """``ops`` ``find_one_and_update`` calls (``$inc`` of one field, returning the new
    document), ``parallel`` at a time, each task on its own document."""
    name = fresh_db_name("raw")
    counter = CommandCounter()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        with_database(base_uri, name), event_listeners=[counter]
    )
    try:
        collection = client[name]["raw"]
        await collection.insert_many([{"_id": i, "n": 0} for i in range(parallel)])
        each = max(1, ops // parallel)

        async def hammer(doc_id: int) -> None:
            for _ in range(each):
                await collection.find_one_and_update(
                    {"_id": doc_id}, {"$inc": {"n": 1}}, return_document=ReturnDocument.AFTER
                )

        counter.reset()
        began = time.perf_counter()
        await asyncio.gather(*(hammer(i) for i in range(parallel)))
        seconds = time.perf_counter() - began
        commands = counter.snapshot()
    finally:
        await client.close()
        await drop_database(base_uri, name)
    return Measurement(seconds, each * parallel, commands)
