"""An update survives crashes (issue 42), with real processes killed with SIGKILL on a
real nx-27017: a worker killed between taking an update and answering it, or between
writing the answer and recording its reply step, leaves a run that another worker
answers exactly once; a caller killed while it waits loses nothing (its retry with the
same ``update_id`` gets the answer)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engine_core import Engine, WorkflowContext
from pikku_mongo import MongoStore
from tests.conftest import mongo_store, with_database
from tests.mongo.update_crasher import register

ROOT = Path(__file__).resolve().parents[2]
#: The worker's code is imported from its module (not run as ``__main__``): the steps'
#: callables it records are the ones the worker taking over registers.
CRASHER = (
    "import asyncio, sys; from tests.mongo.update_crasher import main; "
    "asyncio.run(main(sys.argv[1:]))"
)


async def _spawn(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


async def _line(proc: asyncio.subprocess.Process) -> bytes:
    assert proc.stdout is not None
    return (await asyncio.wait_for(proc.stdout.readline(), timeout=60)).strip()


async def _kill(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGKILL)
    await proc.wait()


@pytest.mark.parametrize("at", ["wait", "answer"])
async def test_a_worker_killed_before_its_reply_is_recorded_answers_once(
    nx_uri: str, at: str
) -> None:
    store = await mongo_store(nx_uri)
    uri = with_database(nx_uri, store.database.name)
    crasher = await _spawn("-c", CRASHER, uri, "--at", at)
    caller_store = MongoStore.from_uri(uri, max_clock_skew=0)
    caller = Engine(caller_store)  # a bare client: no workflow code
    try:
        assert await _line(crasher) == b"serving"
        run_id = await caller.start("desk")
        asking = asyncio.create_task(caller.update(run_id, "ask", 1, update_id="u-1", timeout=120))
        try:
            assert await _line(crasher) == b"between"
        finally:
            await _kill(crasher)
        if at == "wait":
            assert not asking.done()  # not answered yet (at "answer" it may be: it is written)
        taker = Engine(store, lease_ttl="1s", recovery_interval="0.5s", undispatched_after="1s")
        register(taker, None)
        async with taker:
            answer = await asyncio.wait_for(asking, timeout=60)
            assert await taker.result(run_id, timeout=60) == 2
        # ``wait``: the new worker answered; ``answer``: the killed one's answer was kept.
        by = os.getpid() if at == "wait" else crasher.pid
        assert answer == {"value": 2, "by": by}
        assert await caller.update(run_id, "ask", 99, update_id="u-1", timeout=30) == answer
        updates = await store.list_updates(run_id, pending=False)
        assert [(u.update_id, u.payload, u.answer) for u in updates] == [
            ("u-1", 1, {"value": answer})
        ]
        steps = (await caller.status(run_id)).steps
        assert sorted(steps) == ["ask", "reply:ask", "work"]
        assert steps["reply:ask"].attempts == 1
    finally:
        await _kill(crasher)
        await caller_store.close()
        await store.close()


async def test_a_caller_killed_while_it_waits_gets_the_answer_on_its_retry(
    nx_uri: str,
) -> None:
    store = await mongo_store(nx_uri)
    uri = with_database(nx_uri, store.database.name)
    engine = Engine(store, lease_ttl="2s")

    @engine.workflow("slow-desk")
    async def slow_desk(ctx: WorkflowContext, data: Any) -> None:
        req = await ctx.wait_for_update("ask")
        assert req is not None
        await ctx.wait_for_event("go")  # the answer comes after the caller died
        await req.reply({"doubled": req.payload * 2})

    try:
        async with engine:
            run_id = await engine.start("slow-desk")
            cli = await _spawn(
                "-m", "pikku_mongo.cli", "--uri", uri, "runs", "update", run_id, "ask",
                "--payload", "21", "--update-id", "c-1", "--wait", "600",
            )  # fmt: skip
            try:
                while True:  # until the run took the update the caller sent
                    updates = await store.list_updates(run_id, pending=True)
                    if updates and updates[0].consumed_by is not None:
                        break
                    await asyncio.sleep(0.05)
            finally:
                await _kill(cli)
            assert cli.returncode == -signal.SIGKILL
            await engine.send_event(run_id, "go")
            retried = await engine.update(run_id, "ask", 21, update_id="c-1", timeout=30)
            assert retried == {"doubled": 42}
            await engine.result(run_id, timeout=30)
            assert len(await store.list_updates(run_id, pending=False)) == 1
    finally:
        await store.close()
