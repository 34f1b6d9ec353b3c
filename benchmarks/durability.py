"""What the store's durable defaults cost: sequential commands by ``_id``, one client,
each write concern in turn, on the same server in the same run.

    python -m benchmarks.durability [--ops 500] [--reps 15]

Write concerns: the server's default (none sent), ``w=1``, ``w=1, j=true`` and the
store's default (``w="majority", j=true, wtimeout=10000``); read concerns: none,
``local`` and ``majority``. Prints a Markdown table of medians. MongoStore runs on
``MONGODB_URI`` when it is set, else on an nx-27017 server started here. The whole
engine's cost is the W1 workload: ``python -m benchmarks --only W1 --systems mongo
--quick`` against ``--write-concern w1``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from pymongo import AsyncMongoClient, WriteConcern
from pymongo.read_concern import ReadConcern

from benchmarks.common import mongo_server, with_database
from pikku_mongo.store.options import DEFAULT_WRITE_CONCERN

WRITES: list[tuple[str, WriteConcern]] = [
    ("server default (none sent)", WriteConcern()),
    ("w=1", WriteConcern(w=1)),
    ("w=1, j=true", WriteConcern(w=1, j=True)),
    ("w=majority, j=true, wtimeout=10s (the store's default)", DEFAULT_WRITE_CONCERN),
]
READS: list[tuple[str, ReadConcern]] = [
    ("server default (none sent)", ReadConcern()),
    ("local", ReadConcern("local")),
    ("majority (the store's default)", ReadConcern("majority")),
]


async def updates(coll: Any, ops: int) -> float:
    """Sequential ``update_one`` by ``_id`` per second."""
    began = time.perf_counter()
    for i in range(ops):
        await coll.update_one({"_id": f"d{i % 100}"}, {"$inc": {"n": 1}})
    return ops / (time.perf_counter() - began)


async def reads(coll: Any, ops: int) -> float:
    """Sequential ``find_one`` by ``_id`` per second."""
    began = time.perf_counter()
    for i in range(ops):
        await coll.find_one({"_id": f"d{i % 100}"})
    return ops / (time.perf_counter() - began)


async def measure(uri: str, ops: int, reps: int) -> list[tuple[str, str, float]]:
    """Rounds of ``ops`` commands per concern, the concerns interleaved within each round
    (so a machine that gets busier or quieter meanwhile weighs on all of them alike);
    the median round of each."""
    client: AsyncMongoClient[Any] = AsyncMongoClient(with_database(uri, "dur"))
    # One database per concern: nx-27017 applies a write concern to the database's SQLite
    # connection (j=true: synchronous=FULL) and keeps it until another one arrives, so a
    # command sending none would inherit the last one's.
    tag = uuid.uuid4().hex[:6]
    plan: list[tuple[str, str, Any, Any]] = []
    for i, (name, wc) in enumerate(WRITES):
        coll = client[f"dur_{tag}_w{i}"].get_collection("docs", write_concern=wc)
        plan.append(("update_one by _id", name, coll, updates))
    for i, (name, rc) in enumerate(READS):
        coll = client[f"dur_{tag}_r{i}"].get_collection("docs", read_concern=rc)
        plan.append(("find_one by _id", name, coll, reads))
    rates: dict[tuple[str, str], list[float]] = {(c, n): [] for c, n, _, _ in plan}
    try:
        for _, _, coll, _ in plan:
            await coll.insert_many([{"_id": f"d{i}", "n": 0} for i in range(100)])
        await updates(plan[0][2], ops // 2)  # warm-up
        for _ in range(reps):
            for command, name, coll, run in plan:
                rates[(command, name)].append(await run(coll, ops))
    finally:
        for _, _, coll, _ in plan:
            await client.drop_database(coll.database.name)
        await client.close()
    return [(c, n, statistics.median(r)) for (c, n), r in rates.items()]


def table(rows: list[tuple[str, str, float]]) -> str:
    base: dict[str, float] = {}
    lines = [
        "| command | concern | ops/s | ms per op | time vs first row |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for command, name, rate in rows:
        first = base.setdefault(command, rate)
        lines.append(
            f"| {command} | {name} | {rate:,.0f} | {1000 / rate:.3f} | {first / rate:.2f}x |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=500)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pikku-dur-") as tmp:
        with mongo_server(Path(tmp)) as server:
            rows = asyncio.run(measure(server.uri, args.ops, args.reps))
            print(f"Server: {server.label}; median of {args.reps} interleaved rounds of "
                  f"{args.ops} sequential commands")  # fmt: skip
            print()
            print(table(rows))


if __name__ == "__main__":
    main()
