"""S1: how soon a schedule's fire becomes a run. A live engine serves an ``every="1s"``
schedule; for each of its first fires, the figure is the run's ``created_at`` minus the
fire time (the run id names the fire, to the second, and every=1s fires on whole
seconds). Median and max in milliseconds."""

from __future__ import annotations

import asyncio
import statistics
from datetime import UTC, datetime
from typing import Any

from benchmarks.common import Measurement, StoreKind, open_store
from engine_core import Engine, WorkflowContext

SCHEDULE = "bench-tick"
WORKFLOW = "bench-scheduled"


def _fire_of(run_id: str) -> datetime:
    stamp = run_id.split("@", 1)[1]
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


async def fire_latency(kind: StoreKind, uri: str | None, fires: int = 10) -> Measurement:
    async with open_store(kind, uri, "s1_fire") as (store, _, _):
        await store.init()
        engine = Engine(store)

        @engine.workflow(WORKFLOW)
        async def scheduled(ctx: WorkflowContext, data: Any) -> None:
            return None

        async with engine:
            await engine.create_schedule(SCHEDULE, WORKFLOW, every="1s")
            loop = asyncio.get_running_loop()
            deadline = loop.time() + fires + 10
            while True:
                runs = await engine.list_runs(prefix=f"{SCHEDULE}@", limit=1000)
                if len(runs) >= fires or loop.time() > deadline:
                    break
                await asyncio.sleep(0.25)
    if len(runs) < fires:
        raise RuntimeError(f"only {len(runs)} of {fires} fires started a run")
    lags = []
    for run in runs[:fires]:
        assert run.created_at is not None
        lags.append((run.created_at - _fire_of(run.run_id)).total_seconds())
    median = statistics.median(lags)
    return Measurement(median, 1, {}, {"median_ms": median * 1000, "max_ms": max(lags) * 1000})
