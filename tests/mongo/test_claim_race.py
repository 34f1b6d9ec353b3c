"""4 OS processes claim the same 500 queued steps at once, in batches: exactly one winner
per step (also with targeted polling: the claims then read the job index)."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections import Counter
from datetime import timedelta
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest

from engine_core.common.clock import utcnow
from engine_core.records import StepRecord
from pikku_mongo import MongoStore
from tests.conftest import with_database
from tests.support.start_line import SPAWN, all_ready, start_line

STEPS = 500
PROCESSES = 4


def _claimer(uri: str, line: Barrier, out: str, targeted: bool) -> None:
    async def claim_all() -> list[str]:
        store = MongoStore.from_uri(uri, targeted_polling=targeted)
        won: list[str] = []
        try:
            await store.database.command("ping")  # connected: the first claim goes at once
            await all_ready(line)
            empty = 0
            while empty < 3:  # a batch can come back empty while others hold the rest
                batch = await store.claim_steps(
                    ["race"], holder=f"p{id(store)}", claim_ttl=600, limit=25
                )
                won += [step.key for step in batch]
                empty = 0 if batch else empty + 1
            return won
        finally:
            await store.close()

    won = asyncio.run(claim_all())
    with open(out, "w") as handle:
        json.dump(won, handle)


@pytest.mark.parametrize("targeted", [False, True], ids=["scan", "targeted"])
@pytest.mark.parametrize("server", ["nx_uri", "mongoeco_uri"])
async def test_concurrent_claims_from_four_processes(
    request: pytest.FixtureRequest, server: str, targeted: bool, tmp_path: object
) -> None:
    uri = with_database(request.getfixturevalue(server), f"race_{uuid.uuid4().hex[:10]}")
    store = MongoStore.from_uri(uri, targeted_polling=targeted)
    await store.init()
    due = utcnow() - timedelta(seconds=1)
    for i in range(STEPS):
        await store.insert_step(
            StepRecord(
                run_id=f"run-{i % 50}",
                key=f"step-{i:03d}",
                kind="dispatch",
                status="scheduled",
                function="race",
                due_at=due,
                scheduled_at=due,
            )
        )
    line = start_line(PROCESSES)
    outputs = [f"{tmp_path}/claims-{n}.json" for n in range(PROCESSES)]
    procs = [SPAWN.Process(target=_claimer, args=(uri, line, out, targeted)) for out in outputs]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=300)
        assert proc.exitcode == 0
    claims: list[str] = []
    per_process = []
    for out in outputs:
        won = json.loads(Path(out).read_text())  # noqa: ASYNC240 - a small local file
        per_process.append(len(won))
        claims.extend(won)
    counted = Counter(claims)
    assert len(counted) == STEPS, "some step was never claimed"
    assert max(counted.values()) == 1, "a step was claimed twice"
    assert sum(per_process) == STEPS
    assert sum(1 for n in per_process if n > 0) >= 2, "the processes did not overlap"
    steps = await store.load_steps("run-0")
    assert all(s.status == "running" and s.attempts == 1 for s in steps)
    print(f"{server}: claims per process {per_process}", file=sys.stderr)
    await store.close()
