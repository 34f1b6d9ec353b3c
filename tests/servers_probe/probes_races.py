"""The wire-server probes of concurrency: two processes racing on
``find_one_and_update`` claims, and the sequential claim rate."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import random
import time
from typing import Any

from pymongo import AsyncMongoClient, ReturnDocument
from pymongo.errors import PyMongoError

from tests.servers_probe.probing import Check, Ctx, Doc, diff, fmt_exc, ok, probe, t


async def fouu_rate(c: Ctx, seconds: float = 4.0, max_ops: int = 20000) -> str:
    col = c.coll("rate")
    await col.insert_many(
        [{"_id": i, "n": 0, "status": "free", "due_at": t(i)} for i in range(200)]
    )
    await col.create_index([("status", 1), ("due_at", 1)])
    n = 0
    start = time.perf_counter()
    while n < max_ops and time.perf_counter() - start < seconds:
        await col.find_one_and_update(
            {"_id": n % 200, "status": "free"},
            {"$inc": {"n": 1}, "$set": {"at": t(n)}},
            return_document=ReturnDocument.AFTER,
        )
        n += 1
    el = time.perf_counter() - start
    # queue-style: non-_id filter + sort, the engine's claim shape
    m = 0
    start2 = time.perf_counter()
    while m < max_ops and time.perf_counter() - start2 < seconds:
        await col.find_one_and_update(
            {"status": "free", "due_at": {"$lte": t(10_000)}},
            {"$set": {"due_at": t(1000 + m)}},
            sort=[("due_at", 1), ("_id", 1)],
        )
        m += 1
    el2 = time.perf_counter() - start2
    return (
        f"by _id: {n / el:.0f} ops/s ({n} ops); "
        f"status+due_at $lte + sort over 200 docs: {m / el2:.0f} ops/s ({m} ops)"
    )


def _race_worker(uri: str, db: str, coll: str, me: str, mode: str, barrier: Any, out: Any) -> None:
    async def run() -> None:
        client: AsyncMongoClient[Doc] = AsyncMongoClient(uri)
        col = client[db][coll]
        await client.admin.command("ping")
        barrier.wait()
        got: list[int] = []
        errors: list[str] = []
        ops = 0
        start = time.perf_counter()
        if mode == "by_id":
            order = list(range(500))
            random.Random(me).shuffle(order)  # different order per worker
            for i in order:
                ops += 1
                try:
                    doc = await col.find_one_and_update(
                        {"_id": i, "status": "free"}, {"$set": {"status": "taken", "owner": me}}
                    )
                except PyMongoError as e:
                    errors.append(fmt_exc(e))
                    continue
                if doc is not None:
                    got.append(doc["_id"])
        else:  # queue: claim next free by sort until none left
            while ops < 2000:
                ops += 1
                try:
                    doc = await col.find_one_and_update(
                        {"status": "free"},
                        {"$set": {"status": "taken", "owner": me}},
                        sort=[("_id", 1)],
                    )
                except PyMongoError as e:
                    errors.append(fmt_exc(e))
                    continue
                if doc is None:
                    break
                got.append(doc["_id"])
        el = time.perf_counter() - start
        await client.close()
        out.put(
            {
                "me": me,
                "got": got,
                "ops": ops,
                "secs": el,
                "errors": errors[:5],
                "n_errors": len(errors),
            }
        )

    asyncio.run(run())


async def race(c: Ctx, mode: str) -> Check:
    col = c.coll(f"race_{mode}")
    await col.insert_many([{"_id": i, "status": "free"} for i in range(500)])
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    q = ctx.Queue()
    procs = [
        ctx.Process(
            target=_race_worker, args=(c.uri, c.db.name, col.name, f"w{k}", mode, barrier, q)
        )
        for k in range(2)
    ]
    for p in procs:
        p.start()
    res = sorted((q.get(timeout=300) for _ in procs), key=lambda r: r["me"])
    for p in procs:
        p.join(timeout=30)
    a, b = set(res[0]["got"]), set(res[1]["got"])
    double = len(a & b)
    owners: dict[str, int] = {}
    async for d in col.find({}):
        owners[d.get("owner", "-")] = owners.get(d.get("owner", "-"), 0) + 1
    mismatched = 0
    async for d in col.find({}):
        o = d.get("owner")
        mine = a if o == "w0" else b if o == "w1" else set()
        if d["_id"] not in mine:
            mismatched += 1
    total_ops = res[0]["ops"] + res[1]["ops"]
    wall = max(r["secs"] for r in res)
    detail = (
        f"claims w0={len(a)} w1={len(b)} sum={len(a) + len(b)}/500; double-claims={double}; "
        f"stored owners={owners}; owner!=claimer={mismatched}; ops={total_ops} in {wall:.2f}s "
        f"= {total_ops / wall:.0f} ops/s, {(len(a) + len(b)) / wall:.0f} claims/s; "
        f"errors={res[0]['n_errors'] + res[1]['n_errors']} {res[0]['errors'] + res[1]['errors']}"
    )
    good = double == 0 and len(a) + len(b) == 500 and mismatched == 0
    return ok(detail) if good else diff(detail)


@probe(
    "race: 2 procs x 500 fouu {_id:i,status:free}->taken (shuffled order)",
    "0 double claims, 500 total",
)
async def p_race_id(c: Ctx) -> Check:
    return await race(c, "by_id")


@probe("race: 2 procs fouu {status:free} sort _id (queue pop)", "0 double claims, 500 total")
async def p_race_queue(c: Ctx) -> Check:
    return await race(c, "queue")


@probe("sequential find_one_and_update rate (1 client)", "-")
async def p_rate(c: Ctx) -> Check:
    return Check("info", await fouu_rate(c))
