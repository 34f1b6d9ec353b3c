"""4 OS processes serve the same ``every="1s"`` schedule on one database at once: each
fire starts exactly one run, and no fire in the window is skipped."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import pytest

from engine_core import Engine, WorkflowContext
from pikku_mongo import MongoStore
from tests.conftest import with_database
from tests.support.start_line import SPAWN, all_ready, start_line

PROCESSES = 4
SERVE_S = 4.0


def _engine(store: MongoStore) -> Engine:
    engine = Engine(store, lease_ttl="5s")

    @engine.workflow("tick")
    async def tick(ctx: WorkflowContext, data: Any) -> Any:
        return data

    return engine


def _server(uri: str, line: Barrier, out: str) -> None:
    async def serve() -> dict[str, float]:
        store = MongoStore.from_uri(uri, max_clock_skew=0)
        engine = _engine(store)
        try:
            await store.database.command("ping")
            await all_ready(line)
            begin_at = time.time()
            async with engine:
                # A busy machine may start a process late: the window is judged from
                # when each one began serving, not from when it was asked to.
                serving_from = time.time()
                await asyncio.sleep(max(0.0, begin_at + SERVE_S - time.time()))
                scheduler = engine._host.scheduler
                fired = scheduler.fired if scheduler is not None else -1
                return {"fired": fired, "from": serving_from, "to": time.time()}
        finally:
            await store.close()

    Path(out).write_text(json.dumps(asyncio.run(serve())))


def _fire_of(run_id: str) -> float:
    stamp = run_id.split("@", 1)[1]
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


@pytest.mark.parametrize("server", ["nx_uri", "mongoeco_uri"])
async def test_four_processes_fire_each_fire_once(
    request: pytest.FixtureRequest, server: str, tmp_path: Path
) -> None:
    uri = with_database(request.getfixturevalue(server), f"sched_{uuid.uuid4().hex[:10]}")
    store = MongoStore.from_uri(uri, max_clock_skew=0)
    await store.init()
    engine = _engine(store)
    await engine.create_schedule("race", "tick", every="1s", input={"from": "race"})
    line = start_line(PROCESSES)
    outputs = [str(tmp_path / f"fired-{n}.json") for n in range(PROCESSES)]
    procs = [SPAWN.Process(target=_server, args=(uri, line, out)) for out in outputs]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=120)
        assert proc.exitcode == 0
    served = [json.loads(Path(out).read_text()) for out in outputs]  # noqa: ASYNC240
    fired = [s["fired"] for s in served]
    begin_at = min(s["from"] for s in served)
    end_at = max(s["to"] for s in served)
    runs = [r.run_id for r in await engine.list_runs(prefix="race@", limit=1000)]
    counted = Counter(runs)
    assert max(counted.values()) == 1
    fires = sorted(_fire_of(r) for r in runs)
    # Every whole second the processes served through fired (the first may be the
    # collapsed fire of the seconds before they started, the last may be cut off).
    expected = range(int(begin_at) + 1, int(end_at))
    assert set(expected) <= set(int(f) for f in fires), (fires, begin_at, end_at)
    assert fires == [fires[0] + i for i in range(len(fires))], "a fire was skipped"
    assert len(fires) <= end_at - begin_at + 2
    starters: Counter[str] = Counter()
    for run_id in runs:
        run = await store.get_run(run_id)
        assert run is not None and run.workflow == "tick" and run.input == {"from": "race"}
        starters[run.wire["started_by"]] += 1
    print(
        f"{server}: {len(runs)} fires, starts attempted per process {fired}, "
        f"runs inserted per process {sorted(starters.values())}",
        file=sys.stderr,
    )
    schedule = await store.get_schedule("race")
    assert schedule is not None and schedule.next_fire_at.timestamp() > fires[-1]
    await store.close()
