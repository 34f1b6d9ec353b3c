"""The dashboard's page load times with many runs in the store (100,000 by default).

Seeds the runs straight into MongoStore's collections with ``insert_many`` of the
store's own documents (``run_to_doc``, ``step_to_doc``): a spread of statuses,
workflows, creation times over a week, run ids mostly random (as ``engine.start``
makes them) and some with an ``order-`` prefix, and ``--steps`` step documents per run.
Then it times each page through the ASGI app (httpx's ASGI transport, no network), and
the Engine calls behind them, as the median and the worst of ``--reps`` loads.

MongoStore runs against ``MONGODB_URI`` when set, else on an nx-27017 server started
here. Usage: python -m benchmarks.dashboard_load [--runs 100000] [--steps 2] [--reps 5]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import OUT_DIR, drop_database, fresh_db_name, mongo_server, with_database
from engine_core import Engine
from engine_core.records import AttemptEntry, RunRecord, StepRecord
from pikku_mongo import MongoStore
from pikku_mongo.dashboard import dashboard_app
from pikku_mongo.wire.documents import run_to_doc, step_to_doc

STATUSES = [
    ("completed", 70),
    ("failed", 5),
    ("running", 10),
    ("suspended", 2),
    ("cancelled", 7),
    ("compensated", 4),
    ("compensation_failed", 1),
    ("compensating", 1),
]
WORKFLOWS = ["order", "billing", "reports", "emails", "sync"]
BATCH = 2000
#: The run every run page load shows: ten steps, one retried, and a sleep.
SHOWN = "order-shown"


def make_runs(count: int, now: datetime, rng: random.Random) -> list[RunRecord]:
    names = [s for s, _ in STATUSES]
    weights = [w for _, w in STATUSES]
    runs = []
    for i in range(count):
        workflow = WORKFLOWS[i % len(WORKFLOWS)]
        random_id = uuid.UUID(int=rng.getrandbits(128)).hex
        run_id = f"order-{i:06d}" if workflow == "order" else random_id
        created = now - timedelta(seconds=rng.uniform(0, 7 * 86400))
        status = rng.choices(names, weights)[0]
        error = None
        if status in ("failed", "compensated", "compensation_failed"):
            error = {"type": "ValueError", "message": "card declined", "step": "s1"}
        runs.append(
            RunRecord(
                run_id=run_id,
                workflow=workflow,
                status=status,  # type: ignore[arg-type]
                input={"n": i, "customer": f"c-{i % 977}"},
                created_at=created,
                updated_at=created + timedelta(seconds=rng.uniform(0, 60)),
                output={"ok": True} if status == "completed" else None,
                error=error,
                wire={"traceparent": f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01"},
                pending_pass=False,
                passes=1,
                token=1,
            )
        )
    return runs


def steps_of(run: RunRecord, count: int) -> list[StepRecord]:
    steps = []
    for k in range(count):
        started = run.created_at + timedelta(milliseconds=5 + 10 * k)
        ended = started + timedelta(milliseconds=4)
        steps.append(
            StepRecord(
                run_id=run.run_id,
                key=f"s{k}",
                kind="inline",
                status="succeeded",
                attempts=1,
                result={"k": k},
                updated_at=ended,
                ended_at=ended,
                history=[AttemptEntry(1, "succeeded", ended, started_at=started)],
            )
        )
    return steps


def shown_run(now: datetime) -> tuple[RunRecord, list[StepRecord]]:
    created = now - timedelta(minutes=5)
    run = RunRecord(
        run_id=SHOWN, workflow="order", status="completed", input={"id": 1}, created_at=created,
        updated_at=created + timedelta(seconds=3), output={"ok": True},
        wire={"traceparent": f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01"},
        pending_pass=False, passes=3, token=3,
    )  # fmt: skip
    steps = steps_of(run, 10)
    retried = steps[3]
    first = retried.history[0]
    boom = {"type": "ConnectionError", "message": "gateway timeout"}
    retried.attempts = 2
    retried.history = [
        AttemptEntry(1, "failed", first.at, started_at=first.started_at, error=boom),
        AttemptEntry(2, "succeeded", first.at + timedelta(milliseconds=500),
                     started_at=first.at + timedelta(milliseconds=400)),
    ]  # fmt: skip
    nap = steps[6]
    nap.kind = "sleep"
    nap.scheduled_at = nap.history[0].started_at
    nap.history = [AttemptEntry(1, "succeeded", nap.history[0].at + timedelta(seconds=2))]
    return run, steps


async def seed(store: MongoStore, runs: int, steps: int, rng: random.Random) -> float:
    began = time.perf_counter()
    now = datetime.now(UTC)
    made = make_runs(runs, now, rng)
    extra, extra_steps = shown_run(now)
    made.append(extra)
    for i in range(0, len(made), BATCH):
        batch = made[i : i + BATCH]
        await store.runs.insert_many([run_to_doc(r) for r in batch], ordered=False)
        if steps:
            docs = [step_to_doc(s) for r in batch if r is not extra for s in steps_of(r, steps)]
            if docs:
                await store.steps.insert_many(docs, ordered=False)
        print(f"\rseeded {min(i + BATCH, len(made)):,} runs", end="", flush=True)
    await store.steps.insert_many([step_to_doc(s) for s in extra_steps], ordered=False)
    print()
    return time.perf_counter() - began


async def timed(call: Callable[[], Awaitable[Any]], reps: int) -> tuple[float, float]:
    """Median and worst of ``reps`` calls, in milliseconds (after one warm-up call)."""
    await call()
    times = []
    for _ in range(reps):
        began = time.perf_counter()
        await call()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times), max(times)


async def measure(engine: Engine, reps: int) -> list[tuple[str, str, float, float]]:
    app = dashboard_app(engine)
    middle = (await engine.list_runs(limit=1, after="8", order="id"))[0].run_id
    now = datetime.now(UTC)
    since = (now - timedelta(days=3)).strftime("%Y-%m-%dT%H:%M:%S")
    before = (now - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%S")
    pages = [
        ("runs list, first page (newest first)", "/runs", {}),
        ("runs list, oldest first", "/runs?order=oldest", {}),
        ("runs list, by run id", "/runs?order=id", {}),
        ("runs list, live refresh (htmx)", "/runs", {"HX-Request": "true"}),
        ("runs list, status=failed", "/runs?status=failed", {}),
        ("runs list, workflow=order", "/runs?workflow=order", {}),
        ("runs list, workflow=order&status=running", "/runs?workflow=order&status=running", {}),
        ("runs list, next page (after=)", f"/runs?after={middle}", {}),
        ("runs list, next page by id (after=)", f"/runs?after={middle}&order=id", {}),
        ("runs list, id prefix order-05", "/runs?prefix=order-05", {}),
        ("runs list, created 3 to 2 days ago", f"/runs?since={since}&before={before}", {}),
        ("run page (10 steps)", f"/run?id={SHOWN}", {}),
        ("run page, live refresh (htmx)", f"/run?id={SHOWN}", {"HX-Request": "true"}),
    ]
    rows = []
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        for label, path, headers in pages:

            async def load(path: str = path, headers: dict[str, str] = headers) -> None:
                response = await client.get(path, headers=headers)
                assert response.status_code == 200, (path, response.status_code, response.text)

            rows.append(("page", label, *await timed(load, reps)))
    calls: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("engine.count_runs()", lambda: engine.count_runs()),
        ("engine.count_runs('order')", lambda: engine.count_runs("order")),
        ("engine.list_runs(limit=51)", lambda: engine.list_runs(limit=51)),
        ("engine.list_runs(limit=51, after=...)", lambda: engine.list_runs(limit=51, after=middle)),
        ("engine.list_runs(limit=51, prefix='order-05')",
         lambda: engine.list_runs(limit=51, prefix="order-05")),
        ("engine.list_runs(status='failed', limit=51)",
         lambda: engine.list_runs(status="failed", limit=51)),
        ("engine.list_workflows()", lambda: engine.list_workflows()),
        ("engine.status(run)", lambda: engine.status(SHOWN)),
        ("engine.history(run)", lambda: engine.history(SHOWN)),
        ("engine.list_children(run)", lambda: engine.list_children(SHOWN)),
    ]  # fmt: skip
    for label, call in calls:
        rows.append(("engine", label, *await timed(call, reps)))
    return rows


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="dash-bench-") as tmp, mongo_server(Path(tmp)) as srv:
        name = fresh_db_name("dashboard")
        store = MongoStore.from_uri(with_database(srv.uri, name))
        try:
            await store.init()
            seconds = await seed(store, args.runs, args.steps, random.Random(7))
            engine = Engine(store)
            rows = await measure(engine, args.reps)
        finally:
            await store.close()
            await drop_database(srv.uri, name)
    lines = [
        f"Dashboard load times, {args.runs:,} runs and {args.runs * args.steps:,} steps in "
        f"the store (seeded in {seconds:.0f} s), {args.reps} loads each after a warm-up.",
        f"Server: {srv.label}.",
        "",
        "| what | median ms | worst ms |",
        "| --- | ---: | ---: |",
        *(f"| {kind}: {label} | {med:.1f} | {worst:.1f} |" for kind, label, med, worst in rows),
    ]
    text = "\n".join(lines)
    print(text)
    OUT_DIR.mkdir(exist_ok=True)
    (OUT_DIR / "dashboard_load.md").write_text(text + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=2, help="step documents per run")
    parser.add_argument("--reps", type=int, default=5)
    asyncio.run(main(parser.parse_args()))
