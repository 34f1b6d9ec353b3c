"""Q1: admission from a deep queue. ``depth`` runs of a one-step workflow are started on
a queue (by a client, gathered in groups as a web app's requests would be), then one
process serves the queue until its line is empty. The figure is admissions per second:
the runs admitted over the time from serving to the last admission (the line is first
in, first out among equal priorities, so the last run started is the last admitted). With a
``concurrency`` limit, admission keeps pace with the runs that end and free slots;
without one, only the admitter's own cost shows. Commands are those of the serving
process, per admitted run (admission and the runs' own passes). Q2 runs it again with
``keys`` keys (run ``n`` has key ``n % keys``), first come first served and with
``fairness="key"`` (the last run started is the last admitted in both)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from benchmarks.common import Measurement, StoreKind, open_store
from engine_core import Engine, WorkflowContext

QUEUE = "bench-queue"
WORKFLOW = "bench-queued"
START_GROUP = 100


def _engine(store: Any, concurrency: int | None, fairness: str | None) -> Engine:
    engine = Engine(store, concurrency=32)
    engine.queue(QUEUE, concurrency=concurrency, fairness=fairness)

    async def one() -> int:
        return 1

    @engine.workflow(WORKFLOW)
    async def queued(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.step("one", one)

    return engine


async def admission_rate(
    kind: StoreKind,
    uri: str | None,
    depth: int,
    concurrency: int | None,
    *,
    keys: int = 0,
    fairness: str | None = None,
) -> Measurement:
    async with open_store(kind, uri, "q1_admit") as (store, counter, _):
        await store.init()
        client = _engine(store, concurrency, fairness)
        last = ""
        for at in range(0, depth, START_GROUP):
            group = range(at, min(depth, at + START_GROUP))
            ids = await asyncio.gather(
                *(
                    client.start(WORKFLOW, n, queue=QUEUE, key=f"k{n % keys}" if keys else None)
                    for n in group
                )
            )
            last = ids[-1]
        server = _engine(store, concurrency, fairness)
        if counter is not None:
            counter.reset()
        began = time.perf_counter()
        last_admitted = began
        async with server:
            # The line is first in, first out: the last run started is admitted last.
            # (One read by id per poll: counting the line would load the server.)
            while (await server.status(last)).status == "queued":  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            last_admitted = time.perf_counter()
            commands = dict(counter.counts) if counter is not None else {}
    seconds = last_admitted - began
    return Measurement(
        seconds,
        depth,
        commands,
        {"admitted_per_s": depth / seconds, "depth": depth, "limit": float(concurrency or 0)},
    )
