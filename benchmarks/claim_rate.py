"""Claim throughput of MongoStore's step queue beside the server's raw find_one_and_update
rate, measured in the same run on each wire server.

raw: sequential ``find_one_and_update`` by ``_id`` (one client): the server's floor.
claims: ``MongoStore.claim_step`` draining N queued steps, 1 process and 4 processes.
Usage: python -m benchmarks.claim_rate [--steps 500]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

from pymongo import AsyncMongoClient, ReturnDocument

from engine_core.common.clock import utcnow
from engine_core.records import StepRecord
from pikku_mongo import MongoStore

ROOT = Path(__file__).resolve().parent.parent


def _db_uri(base: str, name: str) -> str:
    return f"{base.split('/?')[0].rstrip('/')}/{name}?directConnection=true"


async def raw_rate(base: str, ops: int) -> float:
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(_db_uri(base, "raw"))
    coll = client[f"raw_{uuid.uuid4().hex[:8]}"]["docs"]
    await coll.insert_many([{"_id": f"d{i}", "n": 0} for i in range(100)])
    began = time.perf_counter()
    for i in range(ops):
        await coll.find_one_and_update(
            {"_id": f"d{i % 100}"}, {"$inc": {"n": 1}}, return_document=ReturnDocument.AFTER
        )
    elapsed = time.perf_counter() - began
    await client.close()
    return ops / elapsed


async def fill(uri: str, steps: int) -> None:
    store = MongoStore.from_uri(uri)
    await store.init()
    due = utcnow() - timedelta(seconds=1)
    for i in range(steps):
        await store.insert_step(
            StepRecord(
                run_id=f"run-{i % 50}",
                key=f"s{i:05d}",
                kind="dispatch",
                status="scheduled",
                function="bench",
                due_at=due,
                scheduled_at=due,
            )
        )
    await store.close()


def _drain(uri: str, start_at: float) -> None:
    async def go() -> None:
        store = MongoStore.from_uri(uri)
        await asyncio.sleep(max(0.0, start_at - time.time()))
        empty = 0
        while empty < 3:  # a batch comes back empty while the other processes hold the rest
            batch = await store.claim_steps(
                ["bench"], holder=str(os.getpid()), claim_ttl=600, limit=16
            )
            empty = 0 if batch else empty + 1
        await store.close()

    asyncio.run(go())


def claim_rate(base: str, steps: int, processes: int) -> float:
    uri = _db_uri(base, f"claims_{uuid.uuid4().hex[:8]}")
    asyncio.run(fill(uri, steps))
    start_at = time.time() + 2.0
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=_drain, args=(uri, start_at)) for _ in range(processes)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    return steps / (time.time() - start_at)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=500)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "scripts"))
    import test_servers  # type: ignore[import-not-found]

    print("| server | raw find_one_and_update/s | claims/s, 1 process | claims/s, 4 processes |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("nx-27017", "mongoeco"):
            server = (
                test_servers.start_nx(Path(tmp))
                if name == "nx-27017"
                else test_servers.start_mongoeco()
            )
            if server is None:
                print(f"| {name} | unavailable | | |")
                continue
            try:
                raw = asyncio.run(raw_rate(server.uri, 2000))
                one = claim_rate(server.uri, args.steps, 1)
                four = claim_rate(server.uri, args.steps, 4)
                print(f"| {name} | {raw:.0f} | {one:.0f} | {four:.0f} |", flush=True)
            finally:
                server.stop()


if __name__ == "__main__":
    main()
