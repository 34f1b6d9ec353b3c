"""W5 on MongoStore: dispatched steps run by 1, 2 or 4 worker processes.

Each worker is ``python -m benchmarks.worker`` serving an engine on the same fresh
database; this process is a client (an engine outside ``async with``): it starts the
runs and reads them until every one has ended. The time runs from the first start to
the last run seen ended; worker start-up is not timed. The commands counted are the
workers' and the client's starts (not the client's reads while it waits).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time

from benchmarks.common import (
    DISPATCH_WF,
    REPO_ROOT,
    STORE_OPTIONS,
    Measurement,
    add_counts,
    open_store,
    register_dispatch,
)
from benchmarks.ours import RESULT_TIMEOUT
from engine_core import Engine

READY_TIMEOUT = 120.0


async def _spawn_worker(uri: str) -> asyncio.subprocess.Process:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "benchmarks.worker",
        "--uri",
        uri,
        *(["--targeted-polling"] if STORE_OPTIONS.get("targeted_polling") else []),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        cwd=str(REPO_ROOT),
        env=env,
    )


async def _await_ready(proc: asyncio.subprocess.Process) -> None:
    assert proc.stdout is not None
    while True:
        line = await proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {proc.pid} exited before it was ready")
        if line.strip() == b"ready":
            return


async def _finish(proc: asyncio.subprocess.Process) -> dict[str, int]:
    """Close the worker's stdin (it stops serving) and read its command counts."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    for line in reversed(out.decode().splitlines()):
        if line.startswith("{"):
            return {str(k): int(v) for k, v in json.loads(line)["commands"].items()}
    return {}


async def w5_workers(uri: str, workers: int, runs: int, steps: int) -> Measurement:
    """``runs`` workflows of ``steps`` dispatched no-op steps each, on ``workers``
    worker processes."""
    async with open_store("mongo", uri, f"w5_{workers}") as (store, counter, db_uri):
        assert counter is not None and db_uri is not None
        await store.init()
        procs = [await _spawn_worker(db_uri) for _ in range(workers)]
        try:
            await asyncio.wait_for(asyncio.gather(*(_await_ready(p) for p in procs)), READY_TIMEOUT)
            client = Engine(store)
            register_dispatch(client, steps_function=False)
            counter.reset()
            began = time.perf_counter()
            run_ids = list(
                await asyncio.gather(
                    *(client.start(DISPATCH_WF, {"steps": steps}) for _ in range(runs))
                )
            )
            await asyncio.gather(*(client.result(r, timeout=RESULT_TIMEOUT) for r in run_ids))
            seconds = time.perf_counter() - began
            client_commands = counter.snapshot()
            worker_commands = [await _finish(p) for p in procs]
        finally:
            for proc in procs:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
    commands = add_counts(client_commands, *worker_commands)
    return Measurement(seconds, runs * steps, commands, {"workers": float(workers)})


async def pickup_latency(uri: str, samples: int) -> Measurement:
    """How soon an idle worker in another process starts a newly dispatched step: this
    process dispatches (it has no step function), one worker process runs the step;
    each sample waits until the worker is idle again. The figure per sample is the
    step's timeline: its attempt's start minus the moment it was put on the queue."""
    async with open_store("mongo", uri, "w5_latency") as (store, _, db_uri):
        assert db_uri is not None
        await store.init()
        proc = await _spawn_worker(db_uri)
        try:
            await asyncio.wait_for(_await_ready(proc), READY_TIMEOUT)
            engine = Engine(store)
            register_dispatch(engine, steps_function=False)
            delays: list[float] = []
            async with engine:
                for _ in range(samples):
                    await asyncio.sleep(0.5)  # the worker has gone idle
                    run_id = await engine.start(DISPATCH_WF, {"steps": 1})
                    await engine.result(run_id, timeout=RESULT_TIMEOUT)
                    history = await engine.history(run_id)
                    queued = next(e.at for e in history if e.status == "scheduled")
                    began = next(e.at for e in history if e.status == "running")
                    delays.append((began - queued).total_seconds())
            await _finish(proc)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    median = statistics.median(delays)
    return Measurement(median, 1, {}, {"median_ms": median * 1000, "max_ms": max(delays) * 1000})
