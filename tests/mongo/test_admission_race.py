"""4 OS processes admit from one queue on one database at once, and one of them is
killed while it drives runs: ``concurrency`` and ``key_concurrency`` hold across the
fleet at every moment, the dead process's slots come back with its runs (recovered
elsewhere, and freed when they end), and every run completes."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import pytest

from engine_core import Engine, WorkflowContext
from pikku_mongo import MongoStore
from tests.conftest import with_database
from tests.support.start_line import SPAWN, all_ready, start_line

PROCESSES = 4
RUNS = 24
CONCURRENCY = 3
KEYS = ["a", "b", "c", "d"]
HOLD_S = 0.15


def _engine(store: MongoStore, log: str) -> Engine:
    engine = Engine(
        store, lease_ttl="1s", recovery_interval="300ms", stalled_after="1s", concurrency=8
    )
    engine.queue("work", concurrency=CONCURRENCY, key_concurrency=1)

    def note(run_id: str, key: str, edge: str) -> None:
        entry = {"run": run_id, "key": key, "at": time.time(), "pid": os.getpid(), "edge": edge}
        with open(log, "a") as out:
            out.write(json.dumps(entry) + "\n")

    async def hold(run_id: str, key: str) -> str:
        note(run_id, key, "in")
        await asyncio.sleep(HOLD_S)
        note(run_id, key, "out")
        return key

    @engine.workflow("held")
    async def held(ctx: WorkflowContext, data: Any) -> Any:
        # A step cut short by the kill is a counted attempt: allow another.
        return await ctx.step("hold", hold, data["run"], data["key"], retries=2)

    return engine


def _serve(uri: str, log: str, line: Barrier, seconds: float, targeted: bool) -> None:
    async def serve() -> None:
        store = MongoStore.from_uri(uri, max_clock_skew=0, targeted_polling=targeted)
        try:
            await store.init()
            # Every process starts admitting at the same moment: their first rounds race.
            await all_ready(line)
            async with _engine(store, log):
                await asyncio.sleep(seconds)
        finally:
            await store.close()

    asyncio.run(serve())


def _intervals(log: Path, killed_pid: int, killed_at: float) -> list[tuple[float, float, str]]:
    """(began, ended, key) of every attempt; one cut short by the kill ends then."""
    began: dict[tuple[str, int], dict[str, Any]] = {}
    spans = []
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        ident = (entry["run"], entry["pid"])
        if entry["edge"] == "in":
            began[ident] = entry
        else:
            spans.append((began.pop(ident)["at"], entry["at"], entry["key"]))
    for (_, pid), entry in began.items():
        assert pid == killed_pid, f"an attempt in a live process never ended: {entry}"
        spans.append((entry["at"], killed_at, entry["key"]))
    return spans


def _peak(spans: list[tuple[float, float, str]]) -> int:
    edges = sorted([(b, 1) for b, _, _ in spans] + [(e, -1) for _, e, _ in spans])
    now = peak = 0
    for _, step in edges:  # an end before a start at the same moment
        now += step
        peak = max(peak, now)
    return peak


@pytest.mark.parametrize("targeted", [False, True], ids=["scan", "targeted"])
@pytest.mark.parametrize("server", ["nx_uri", "mongoeco_uri"])
async def test_four_processes_keep_the_limits_and_a_killed_one_loses_no_slot(
    request: pytest.FixtureRequest, server: str, targeted: bool, tmp_path: Path
) -> None:
    uri = with_database(request.getfixturevalue(server), f"adm_{uuid.uuid4().hex[:10]}")
    log = str(tmp_path / "attempts.jsonl")
    store = MongoStore.from_uri(uri, max_clock_skew=0, targeted_polling=targeted)
    await store.init()
    client = _engine(store, log)
    ids = []
    for n in range(RUNS):
        key = KEYS[n % len(KEYS)]
        run_id = f"r{n:02d}"
        ids.append(
            await client.start("held", {"run": run_id, "key": key}, run_id=run_id,
                               queue="work", key=key)
        )  # fmt: skip
    line = start_line(PROCESSES)
    procs = [
        SPAWN.Process(target=_serve, args=(uri, log, line, 30.0, targeted))
        for _ in range(PROCESSES)
    ]
    for proc in procs:
        proc.start()
    # Kill one process once it is inside a step (once all of them started and met).
    victim, killed_at = None, 0.0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        await asyncio.sleep(0.025)
        if Path(log).exists():  # noqa: ASYNC240
            pids = [json.loads(x)["pid"] for x in Path(log).read_text().splitlines()]  # noqa: ASYNC240
            if pids:
                victim = next(p for p in procs if p.pid == pids[-1])
                victim.kill()
                killed_at = time.time()
                break
    assert victim is not None, "no process ever began a step"
    try:
        outputs = await asyncio.gather(*(client.result(r, timeout=90) for r in ids))
    finally:
        for proc in procs:
            proc.kill()
            proc.join(timeout=30)
    assert outputs == [KEYS[n % len(KEYS)] for n in range(RUNS)]
    spans = _intervals(Path(log), victim.pid or -1, killed_at)
    assert _peak(spans) <= CONCURRENCY
    for key in KEYS:
        assert _peak([s for s in spans if s[2] == key]) <= 1, key
    assert _peak(spans) == CONCURRENCY  # the limit is reached, not merely respected
    pids = {json.loads(x)["pid"] for x in Path(log).read_text().splitlines()}  # noqa: ASYNC240
    assert len(pids) >= 2  # the work was shared
    await store.close()
