"""Declared types after a real restart: a process runs a run up to its event wait and
exits; a new process replays it on the same MongoDB database. Every point of the body
saw equal values of the same types in both processes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from engine_core import Engine
from pikku_mongo import MongoStore
from tests.conftest import with_database
from tests.test_values import ORDER, _register
from tests.value_types import Receipt

ROOT = Path(__file__).resolve().parents[2]

FIRST_PROCESS = """
import asyncio, json, sys
from engine_core import Engine
from pikku_mongo import MongoStore
from tests.test_values import ORDER, _register

async def main() -> None:
    seen = []
    engine = Engine(MongoStore.from_uri(sys.argv[1], max_clock_skew=0), lease_ttl="2s")
    _register(engine, seen)
    async with engine:
        run_id = await engine.start("order", ORDER, run_id="restart")
        for _ in range(400):
            steps = (await engine.status(run_id)).steps
            if "paid" in steps and steps["paid"].status == "scheduled":
                break
            await asyncio.sleep(0.05)
    await engine.store.close()
    print(json.dumps([[p, type(v).__name__, repr(v)] for p, v in seen]))

asyncio.run(main())
"""


async def test_a_replay_in_a_new_process_sees_the_first_pass_types(nx_uri: str) -> None:
    uri = with_database(nx_uri, f"vr_{uuid.uuid4().hex[:10]}")
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", FIRST_PROCESS, uri],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    first: dict[str, tuple[str, str]] = {}
    for point, kind, text in json.loads(done.stdout.strip().splitlines()[-1]):
        first.setdefault(point, (kind, text))
    assert set(first) >= {"input", "ship", "weigh", "stamp", "price", "child"}

    seen: list[tuple[str, Any]] = []
    store = MongoStore.from_uri(uri, max_clock_skew=0)
    engine = Engine(store, lease_ttl="2s")
    _register(engine, seen)
    try:
        async with engine:
            await engine.send_event("restart", "paid", None)
            out = await engine.result("restart", timeout=30)
    finally:
        await store.close()
    assert type(out) is Receipt and out.order == ORDER.id
    again = {p: (type(v).__name__, repr(v)) for p, v in seen}
    for point, (kind, text) in first.items():
        assert again[point] == (kind, text), point
