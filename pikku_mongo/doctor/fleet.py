"""``doctor``'s checks of the fleet: each live worker's clock against the server's, and
the runs that no live worker can drive (see :mod:`pikku_mongo.doctor.stranded`)."""

from __future__ import annotations

from typing import Any

from engine_core import Engine, Worker
from pikku_mongo.doctor.report import Check
from pikku_mongo.doctor.stranded import Stranded, stranded_runs
from pikku_mongo.store.mongo_store import MongoStore
from pikku_mongo.wire.encoding import unpack


async def workers_check(store: MongoStore, workers: list[Worker]) -> Check:
    """Each live worker's clock offset from the server, as it measured it at start."""
    bound = store.max_clock_skew
    listed = [
        {
            "instance_id": w.instance_id,
            "host": w.host,
            "pid": w.pid,
            "clock_offset_s": w.clock_offset,
            "last_seen": w.last_seen.isoformat(),
        }
        for w in workers
    ]
    data = {"workers": listed, "max_clock_skew_s": bound}
    if not workers:
        return Check("workers", "ok", "no live worker (no engine serves on this store)", data)
    parts, status = [], "ok"
    for w in workers:
        where = f"{w.host}:{w.pid}"
        if w.clock_offset is None:
            parts.append(f"{where} offset unknown")
            continue
        parts.append(f"{where} {w.clock_offset * 1000:+.1f} ms")
        if abs(w.clock_offset) > bound:
            status = "fail"
        elif abs(w.clock_offset) > bound / 2 and status == "ok":
            status = "warn"
    text = f"{len(workers)} live: " + ", ".join(parts) + " (clock offsets from the server)"
    if status != "ok":
        text += f"; beyond {'the' if status == 'fail' else 'half the'} bound ({bound:g} s)"
    return Check("workers", status, text, data)  # type: ignore[arg-type]


async def stranded_jobs(store: MongoStore, workers: list[Worker]) -> list[Stranded]:
    """Dispatched steps waiting on the queue for a step function no live worker
    registers (1 aggregate over the steps' (status, due_at) index)."""
    served = {f for worker in workers for f in worker.step_functions}
    pipeline: list[dict[str, Any]] = [
        # Halted jobs (of runs cancelled or suspended) wait for no worker.
        {"$match": {"status": "scheduled", "kind": "dispatch", "halted": {"$nin": [True, 1]}}},
        {"$group": {"_id": "$function", "n": {"$sum": 1}}},
    ]
    counts: dict[str, int] = {}
    for doc in await (await store.steps.aggregate(pipeline)).to_list():
        function = unpack(str(doc["_id"] or ""))
        if function not in served:
            counts[function] = counts.get(function, 0) + int(doc["n"])
    return [
        Stranded(f"(steps of {name!r})", n, f"step function {name!r}")
        for name, n in sorted(counts.items())
    ]


async def stranded_check(store: MongoStore, workers: list[Worker]) -> Check:
    """Runs waiting for a worker whose workflow no live worker registers, and queued
    dispatched steps whose step function none registers."""
    found = await stranded_runs(Engine(store), workers) + await stranded_jobs(store, workers)
    data = {
        "stranded": [
            {"workflow": s.workflow, "version": s.version, "runs": s.runs, "missing": s.missing}
            for s in found
        ]
    }
    if not found:
        return Check("stranded runs", "ok", "every waiting run has a live worker to drive it", data)
    listed = ", ".join(s.describe() for s in found)
    return Check(
        "stranded runs",
        "warn",
        f"no live worker can drive these runs: {listed}",
        data,
    )


async def fleet_checks(store: MongoStore) -> list[Check]:
    """The fleet's checks: the live workers, and the runs and jobs no live worker can drive."""
    workers = await store.list_workers()
    return [await workers_check(store, workers), await stranded_check(store, workers)]
