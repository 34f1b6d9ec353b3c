"""A fork on MongoDB is crash-safe without transactions (issue 21): a forking process
killed between the fork's writes (real process, SIGKILL, real nx-27017) leaves no fork
anyone sees; what it wrote is cleaned up; a repeat with the same ``new_run_id`` makes
the fork whole, once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from engine_core import Engine, RunNotFoundError, WorkflowContext, WorkflowRunFailedError
from engine_core.common.clock import utcnow
from pikku_mongo import MongoStore
from tests.conftest import with_database

ROOT = Path(__file__).resolve().parents[2]
STEPS = 200


def register(engine: Engine, broken: dict[str, bool], calls: list[int]) -> None:
    def step(i: int) -> int:
        calls.append(i)
        return i

    def last() -> str:
        if broken["on"]:
            raise ConnectionError("provider down")
        return "done"

    @engine.workflow("many")
    async def many(ctx: WorkflowContext, data: Any) -> Any:
        total = 0
        for i in range(STEPS):
            total += await ctx.step(f"s{i}", step, i)
        return [total, await ctx.step("last", last)]


async def _kill_between(uri: str, run_id: str, fork_id: str, at: str) -> None:
    """Run the forking process until it stands between two writes, then SIGKILL it."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.mongo.fork_crasher",
        uri,
        run_id,
        fork_id,
        "--at",
        at,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=60)
        assert line.strip() == b"between"
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()


async def test_a_fork_killed_between_its_writes_is_invisible_then_cleaned(
    nx_uri: str,
) -> None:
    uri = with_database(nx_uri, f"t_{uuid.uuid4().hex[:12]}")
    store = MongoStore.from_uri(uri, max_clock_skew=0)
    await store.init()
    broken, calls = {"on": True}, []
    engine = Engine(store)
    register(engine, broken, calls)
    try:
        async with engine:
            original = await engine.start("many")
            with pytest.raises(WorkflowRunFailedError):
                await engine.result(original, timeout=60)
            await _kill_between(uri, original, "half-made", "steps")
            # Steps were written, the run was not: nobody sees a fork.
            assert await store.steps.count_documents({"run_id": "half-made"}) == STEPS
            with pytest.raises(RunNotFoundError):
                await engine.status("half-made")
            assert await engine.list_forks(original) == []
            assert (await engine.status(original)).forks == 0
            assert "half-made" not in [r.run_id for r in await engine.list_runs(limit=100)]
            # Recovery's sweep undoes it once its marker is an hour old.
            assert await store.clean_forks(utcnow() - timedelta(hours=1)) == 0
            await engine.recover()
            assert await store.steps.count_documents({"run_id": "half-made"}) == STEPS
            two_hours_us = 2 * 3600 * 1_000_000
            await store.forks.update_one({"_id": "half-made"}, {"$inc": {"at_us": -two_hours_us}})
            await engine.recover()
            assert await store.steps.count_documents({"run_id": "half-made"}) == 0
            assert await store.forks.count_documents({}) == 0

            # Killed again, then the caller repeats its call (same new_run_id): one fork.
            await _kill_between(uri, original, "fork-2", "steps")
            broken["on"] = False
            assert await engine.fork(original, new_run_id="fork-2") == "fork-2"
            assert await engine.result("fork-2", timeout=60) == [sum(range(STEPS)), "done"]
            assert len(calls) == STEPS  # no copied step ran again
            assert await engine.list_forks(original) == ["fork-2"]
            assert await store.forks.count_documents({}) == 0

            # Killed after the run was written: the fork is whole; only its marker is left.
            await _kill_between(uri, original, "fork-3", "run")
            assert await store.clean_forks(utcnow() + timedelta(seconds=1)) == 0
            assert await store.forks.count_documents({}) == 0
            assert await engine.fork(original, new_run_id="fork-3") == "fork-3"
            assert await engine.result("fork-3", timeout=60) == [sum(range(STEPS)), "done"]
            assert len(calls) == STEPS
            assert await engine.list_forks(original) == ["fork-2", "fork-3"]
    finally:
        await store.close()
