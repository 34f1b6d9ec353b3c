"""``pikku-mongo runs tail``: a run's stream entries printed as they come, by another
process, until the run ends."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from engine_core import Engine, WorkflowContext, current_step
from tests.conftest import with_database


@pytest.fixture
def tail_uri(nx_uri: str) -> str:
    return with_database(nx_uri, f"tail_{uuid.uuid4().hex[:12]}")


@pytest.fixture
async def engine_on(tail_uri: str) -> AsyncIterator[Engine]:
    from pikku_mongo import MongoStore

    store = MongoStore.from_uri(tail_uri)
    await store.init()
    engine = Engine(store, lease_ttl="2s")

    async def speak() -> None:
        info = current_step()
        assert info is not None
        for word in ("hel", "lo"):
            await info.write_stream("tokens", word)

    @engine.workflow("talker")
    async def talker(ctx: WorkflowContext, data: Any) -> None:
        await ctx.write_stream("progress", {"done": 1})
        await ctx.step("speak", speak)
        await ctx.wait_for_event("go")
        await ctx.write_stream("progress", {"done": 2})

    yield engine
    await store.close()


def _tail(uri: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pikku_mongo.cli", "runs", "tail", *args],
        env={**os.environ, "MONGODB_URI": uri},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def _line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    return (await asyncio.to_thread(proc.stdout.readline)).rstrip("\n")


async def test_tail_prints_every_stream_as_it_comes_until_the_run_ends(
    engine_on: Engine, tail_uri: str
) -> None:
    async with engine_on:
        run_id = await engine_on.start("talker")
        every = _tail(tail_uri, run_id)
        one = _tail(tail_uri, run_id, "--stream", "progress", "--json")
        try:
            seen = {await _line(every) for _ in range(3)}
            assert seen == {
                'progress 0: {"done": 1}',
                'tokens 0 [speak attempt 1 #0]: "hel"',
                'tokens 1 [speak attempt 1 #1]: "lo"',
            }
            assert json.loads(await _line(one)) == {
                "stream": "progress",
                "position": 0,
                "value": {"done": 1},
            }
            await engine_on.send_event(run_id, "go", None)
            assert await _line(every) == 'progress 1: {"done": 2}'
            assert json.loads(await _line(one))["value"] == {"done": 2}
            for proc in (every, one):
                assert await asyncio.to_thread(proc.wait, 60) == 0
        finally:
            for proc in (every, one):
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()


def test_tail_of_an_unknown_run_fails_in_one_line(tail_uri: str) -> None:
    proc = _tail(tail_uri, "no-such-run")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert err.strip() == "pikku-mongo: no run has id 'no-such-run'"
