"""The second tier of flow control with OS processes racing on one database, on both wire
servers: debounced starts (while serving processes release windows), concurrent
``on_duplicate="cancel"`` starts, and a fair queue and a ``key_rate`` admitted by
several processes at once."""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import pytest

from engine_core import Engine, WorkflowContext
from engine_core.records import TERMINAL, QueueState, RunRecord, debounce_run_id
from pikku_mongo import MongoStore
from tests.conftest import with_database
from tests.support.start_line import SPAWN, all_ready, start_line

SERVERS = ["nx_uri", "mongoeco_uri"]


def _note(path: str, **entry: Any) -> None:
    with open(path, "a") as out:
        out.write(json.dumps({"pid": os.getpid(), "at": time.time(), **entry}) + "\n")


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _engine(store: MongoStore, log: str) -> Engine:
    engine = Engine(store, lease_ttl="2s", recovery_interval="200ms", stalled_after="2s")

    @engine.workflow("echo")
    async def echo(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.step("echo", lambda: data)

    @engine.workflow("held")
    async def held(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("go", timeout="5m")

    @engine.workflow("tenant")
    async def tenant(ctx: WorkflowContext, data: Any) -> Any:
        _note(log, edge="in", run=ctx.run_id, n=data["n"], key=data["key"])
        await ctx.step("hold", asyncio.sleep, 0.05)
        return data["key"]

    engine.queue("fair", concurrency=1, fairness="key")
    engine.queue("rated", key_rate="3/2s")
    return engine


class SpyStore(MongoStore):
    """Logs each run its process admits, with its key and the time the admitter judged
    the admission at (the time its landed queue state stamped this round's admissions
    with in ``key_unsaved``)."""

    log = ""
    judged: dict[str, float] = {}

    async def save_queue_state(self, state: QueueState, *, expect_version: int) -> bool:
        landed = await super().save_queue_state(state, expect_version=expect_version)
        times = [at for _, at, _, version in state.key_unsaved if version == state.version]
        if landed and times:
            self.judged[state.name] = max(times).timestamp()
        return landed

    async def admit_run_holding(
        self, run: RunRecord, *, holder: str, ttl: float
    ) -> RunRecord | None:
        got = await super().admit_run_holding(run, holder=holder, ttl=ttl)
        if got is not None:
            self._admitted([run])
        return got

    async def admit_runs(self, runs: Sequence[RunRecord]) -> int:
        moved = await super().admit_runs(runs)
        self._admitted(runs)  # (a run not moved here was: the test counts each run once)
        return moved

    def _admitted(self, runs: Sequence[RunRecord]) -> None:
        for run in runs:
            if run.queue in self.judged:
                _note(self.log, edge="admitted", run=run.run_id, key=run.queue_key,
                      t=self.judged[run.queue])  # fmt: skip


def _process(uri: str, line: Barrier, log: str, job: str, serve_s: float) -> None:
    async def run() -> None:
        store = SpyStore.from_uri(uri, max_clock_skew=0)
        store.log, store.judged = log, {}
        try:
            await store.init()
            engine = _engine(store, log)
            async with engine:
                await all_ready(line)
                if job == "debounce":
                    await _debounce(engine, log)
                elif job == "cancel":
                    await _cancel(engine, log)
                await asyncio.sleep(serve_s)
        finally:
            await store.close()

    asyncio.run(run())


async def _debounce(engine: Engine, log: str) -> None:
    """Debounced starts of one key for about 3 s, with pauses, while every process
    serves (so windows are released while others join them)."""
    pid = os.getpid()
    for seq in range(30):
        data = {"pid": pid, "seq": seq}
        run_id = await engine.start(
            "echo", data, debounce_key="doc", debounce="300ms", debounce_timeout="1s"
        )
        _note(log, edge="start", run=run_id, seq=seq)
        await asyncio.sleep(random.uniform(0, 0.15))


async def _cancel(engine: Engine, log: str) -> None:
    for seq in range(10):
        run_id = await engine.start("held", seq, dedup_id="d", on_duplicate="cancel")
        _note(log, edge="start", run=run_id, seq=seq)


def _race(
    uri: str, log: str, job: str, processes: int, serve_s: float
) -> tuple[list[Any], Barrier]:
    """The processes, started, and their start line: the caller keeps the line until they
    have passed it (a barrier collected before a spawned process unpickles it is gone)."""
    line = start_line(processes)
    procs = [
        SPAWN.Process(target=_process, args=(uri, line, log, job, serve_s))
        for _ in range(processes)
    ]
    for proc in procs:
        proc.start()
    return procs, line


def _join(race: tuple[list[Any], Barrier]) -> None:
    procs, _line = race
    for proc in procs:
        proc.join(timeout=180)
        assert proc.exitcode == 0


async def _store(request: pytest.FixtureRequest, server: str, name: str) -> tuple[str, MongoStore]:
    uri = with_database(request.getfixturevalue(server), f"{name}_{uuid.uuid4().hex[:10]}")
    store = MongoStore.from_uri(uri, max_clock_skew=0)
    await store.init()
    return uri, store


async def _raced(
    request: pytest.FixtureRequest,
    server: str,
    log: Path,
    job: str,
    processes: int,
    *,
    serve_s: float,
) -> MongoStore:
    """``processes`` processes doing ``job`` at once on a fresh database, then serving
    for ``serve_s``; a store on that database once they have all exited."""
    uri, store = await _store(request, server, job)
    _join(_race(uri, str(log), job, processes, serve_s))
    return store


@pytest.mark.parametrize("server", SERVERS)
async def test_debounced_starts_from_three_serving_processes(
    request: pytest.FixtureRequest, server: str, tmp_path: Path
) -> None:
    log = tmp_path / "log.jsonl"
    store = await _raced(request, server, log, "debounce", 3, serve_s=3.0)
    client = Engine(store)
    client.workflow("echo")(lambda ctx, data: data)
    starts = [e for e in _read(log) if e["edge"] == "start"]
    assert len(starts) == 90
    outputs = {r: await client.result(r, timeout=60) for r in {e["run"] for e in starts}}
    # The windows' runs are windows 0, 1, ... of the key, none skipped.
    windows = {debounce_run_id("echo", "doc", n): n for n in range(len(outputs))}
    assert set(outputs) == set(windows)
    assert len(outputs) >= 2  # windows closed and opened while the starts went on
    by_process: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for e in starts:
        by_process[e["pid"]].append((e["seq"], windows[e["run"]]))
    for seen in by_process.values():
        numbers = [n for _, n in sorted(seen)]
        assert numbers == sorted(numbers)  # one window at a time: none joined after a later
    for run_id, out in outputs.items():
        # The run ran with the last input some process gave it.
        mine = [e["seq"] for e in starts if e["run"] == run_id and e["pid"] == out["pid"]]
        assert out["seq"] == max(mine)
    await store.close()


@pytest.mark.parametrize("server", SERVERS)
async def test_concurrent_cancel_starts_from_four_processes_leave_one_live_run(
    request: pytest.FixtureRequest, server: str, tmp_path: Path
) -> None:
    log = tmp_path / "log.jsonl"
    store = await _raced(request, server, log, "cancel", 4, serve_s=0.0)
    started = {e["run"] for e in _read(log) if e["edge"] == "start"}
    assert len(started) == 40
    runs = await store.get_runs(sorted(started))
    assert len(runs) == 40
    live = [r.run_id for r in runs if r.status not in TERMINAL]
    assert len(live) == 1, sorted((r.run_id, r.status) for r in runs)
    assert {r.status for r in runs if r.run_id not in live} == {"cancelled"}
    assert await store.dedup_holder(None, "d") == live[0]
    await store.close()


async def _served(
    request: pytest.FixtureRequest, server: str, log: Path, queue: str, keys: list[tuple[str, int]]
) -> list[dict[str, Any]]:
    """Start ``count`` runs of each key on ``queue`` (nothing serving yet), serve them
    from three processes until every one has ended; what the processes logged."""
    uri, store = await _store(request, server, queue)
    client = _engine(store, str(log))
    ids = []
    for key, count in keys:
        for n in range(count):
            data = {"n": f"{key}{n}", "key": key}
            ids.append(await client.start("tenant", data, queue=queue, key=key))
    procs, _line = _race(uri, str(log), "serve", 3, 60.0)
    try:
        await asyncio.gather(*(client.result(r, timeout=90) for r in ids))
    finally:
        for proc in procs:
            proc.kill()
            proc.join(timeout=30)
        await store.close()
    return _read(log)


@pytest.mark.parametrize("server", SERVERS)
async def test_three_processes_admit_a_fair_queue_keys_in_turn(
    request: pytest.FixtureRequest, server: str, tmp_path: Path
) -> None:
    logged = await _served(request, server, tmp_path / "log.jsonl", "fair",
                           [("busy", 12), ("x", 3), ("y", 3)])  # fmt: skip
    began = sorted((e for e in logged if e["edge"] == "in"), key=lambda e: e["at"])
    order = list(dict.fromkeys(e["n"] for e in began))
    assert len(order) == 18
    # Turn by turn: each of the first three turns takes one run of each key.
    for turn in range(3):
        assert sorted(order[3 * turn : 3 * turn + 3]) == [f"busy{turn}", f"x{turn}", f"y{turn}"]


@pytest.mark.parametrize("server", SERVERS)
async def test_three_processes_keep_a_key_rate(
    request: pytest.FixtureRequest, server: str, tmp_path: Path
) -> None:
    logged = await _served(request, server, tmp_path / "log.jsonl", "rated", [("a", 8), ("b", 4)])
    admitted: dict[str, dict[str, Any]] = {}
    for e in logged:
        if e["edge"] == "admitted":
            admitted.setdefault(e["run"], e)
    for key, total in (("a", 8), ("b", 4)):
        times = sorted(e["t"] for e in admitted.values() if e["key"] == key)
        assert len(times) == total
        # At most 3 admissions of a key in any 2 s window, judged across all processes.
        assert all(times[i + 3] - times[i] >= 2.0 for i in range(len(times) - 3)), times
