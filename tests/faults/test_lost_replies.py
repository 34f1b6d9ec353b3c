"""A write lands on the server and its reply is lost (the proxy swallows it and resets
the connection): the driver sees a network error and the store repeats the write. For
every write the engine makes, the run must still end as it would have, and no step may
run twice.

The engine runs in this process, through an in-process proxy, on the public API."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from engine_core import Engine, WorkflowContext
from pikku_mongo import MongoStore
from tests.faults.workload import assert_no_step_ran_after_its_success, work
from tests.support.execution_log import read_log, record
from tests.support.proxy import FaultProxy, Where, matches
from tests.support.waiting import wait_step

pytestmark = pytest.mark.faults

RUN = "lost-1"
CHILD = f"{RUN}:kid"


def register_everything(engine: Engine) -> None:
    @engine.workflow("everything")
    async def everything(ctx: WorkflowContext, data: Any) -> list[Any]:
        # 0.8 s: longer than a third of the 2 s lease, so the lease is refreshed.
        a = await ctx.step("a", work, "a", 0.8)
        # Its start carries a's outcome; its own is carried by a write of its own.
        await ctx.step("b", work, "b", 0.01)
        job = await ctx.dispatch("job", "fault-job", {"n": 1, "seconds": 0.01}, retries=0)
        await ctx.sleep("nap", 0.2)
        got = await ctx.wait_for_event("go", timeout=60)
        kid = await ctx.child("kid", "kid", None)
        return [a, job, got, kid]

    @engine.workflow("kid")
    async def kid(ctx: WorkflowContext, data: Any) -> str:
        return str(await ctx.step("k", work, "k", 0.01))


def run_update(command: dict[str, Any], run_id: str = RUN) -> dict[str, Any] | None:
    """The one update of an ``update`` on runs for ``run_id`` (None for anything else)."""
    if command.get("update") != "pikku_runs" or len(command.get("updates", [])) != 1:
        return None
    update: dict[str, Any] = command["updates"][0]
    return update if update["q"].get("_id") == run_id else None


def sets(update: dict[str, Any] | None, prefix: str) -> list[str]:
    """The fields under ``prefix`` that ``update`` sets."""
    if update is None:
        return []
    return [name for name in update["u"].get("$set", {}) if name.startswith(prefix)]


def extends_pass(command: dict[str, Any]) -> bool:
    """extend_pass: the lease on the run document pushed on, guarded by the token."""
    update = run_update(command)
    return update is not None and set(update["u"]) == {"$set"} and sets(update, "") == ["lease_us"]


def starts_first_step(command: dict[str, Any]) -> bool:
    """start_step of ``a``: an entry in flight, no outcome carried."""
    update = run_update(command)
    return bool(sets(update, "inflight.")) and not sets(update, "journal.")


def client_ops(command: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The updates of a client-level ``bulkWrite``, each with its collection, in the
    shape of an ``update`` command's (``q``, ``u``, ``upsert``)."""
    if "bulkWrite" not in command:
        return []
    spaces = [str(ns.get("ns", "")).partition(".")[2] for ns in command.get("nsInfo", [])]
    return [
        (spaces[op["update"]],
         {"q": op.get("filter", {}), "u": op.get("updateMods", {}),
          "upsert": op.get("upsert", False)})
        for op in command.get("ops", [])
        if "update" in op
    ]  # fmt: skip


def carries(key: str, *, starting: bool) -> Where:
    """A write on the run carrying ``key``'s outcome into its journal: start_step (an
    entry put in flight too) or record_steps (the outcome alone)."""

    def where(command: dict[str, Any]) -> bool:
        update = run_update(command)
        entries = [update["u"]["$set"][n] for n in sets(update, "journal.")] if update else []
        return (
            any(f'"k":"{key}"' in e or f'"key":"{key}"' in e for e in entries)
            and bool(sets(update, "inflight.")) == starting
            and "lease_us" not in sets(update, "")
        )

    return where


def releases_dropping_a_copied_entry(command: dict[str, Any]) -> bool:
    """release_pass that also drops journal entries already copied to step records
    (the sleep's, at the end of the pass that woke it)."""
    update = run_update(command)
    return (
        update is not None
        and update["q"].get("token") == 2  # the pass that woke the sleep
        and update["u"]["$set"].get("lease_us") == 0
        and "status" not in update["u"]["$set"]
        and any(n.startswith("journal.") for n in update["u"].get("$unset", {}))
    )


def writes_outcome(written: dict[str, Any], key: str) -> bool:
    """Whether a step document's ``$set`` writes ``key``'s outcome: its own document,
    or a journal page holding it (``pikku_mongo.writes.journal_pages``)."""
    page = written.get("page", [])
    return written.get("key") == key or any(json.loads(text)["k"] == key for text in page)


def rides(key: str, *, starting: bool, run_id: str = RUN) -> Where:
    """A client-level ``bulkWrite`` carrying ``key``'s outcome to its step document or
    a journal page after the run's guarded write: start_step (an entry put in flight) or
    record_steps (the outcome alone)."""

    def where(command: dict[str, Any]) -> bool:
        ops = client_ops(command)
        run = [u for ns, u in ops if ns == "pikku_runs" and u["q"].get("_id") == run_id]
        step = [u for ns, u in ops if ns == "pikku_steps" and writes_outcome(u["u"]["$set"], key)]
        return (
            len(run) == 1
            and bool(sets(run[0], "inflight.")) == starting
            and "lease_us" not in sets(run[0], "")
            and bool(step)
        )

    return where


def tells_parent_of_a_change(command: dict[str, Any]) -> bool:
    """The child's end noted on the parent: a pass owed, and which step changed."""
    return bool(sets(run_update(command), "changed."))


#: A pass owed to the run and nothing else: recovery waking the overdue sleep first,
#: then send_event telling the run of its event (the same command, in that order).
TOLD: dict[str, Any] = {
    "update": "pikku_runs",
    "updates.0.q": {"_id": RUN},
    "updates.0.u": {"$set": {"pending_pass": True}},
}


class Nth:
    """The ``n``-th command matching ``where`` (a fresh count for every test)."""

    def __init__(self, n: int, where: Where) -> None:
        self.n, self.where = n, where

    def fresh(self) -> Where:
        seen = 0

        def where(command: dict[str, Any]) -> bool:
            nonlocal seen
            if matches(command, self.where):
                seen += 1
                return seen == self.n
            return False

        return where


#: The writes that carry an outcome: (the write, whose outcome, its step, whether the
#: write starts a step too).
CARRIED = [
    ("start_step", "an inline outcome", "a", True),
    ("record_steps", "an inline outcome", "b", False),
    ("record_steps", "a sleep's outcome", "nap", False),
    ("start_step", "an event's outcome", "go", True),
]

#: (what, command, where): one write of the engine each, by the command that carries it
#: (captured from what the engine sends in this scenario; each ``where`` matches one).
WRITES: list[tuple[str, str, Where | Nth]] = [
    ("start: insert into runs (the first pass begun in it)", "insert",
     {"insert": "pikku_runs", "documents.0._id": RUN}),
    ("child start: insert into runs", "insert",
     {"insert": "pikku_runs", "documents.0._id": CHILD}),
    ("begin_pass: findAndModify on runs", "findAndModify",
     Nth(1, {"findAndModify": "pikku_runs", "query._id": RUN, "update.$inc.token": 1})),
    ("child's begin_pass: findAndModify on runs", "findAndModify",
     {"findAndModify": "pikku_runs", "query._id": CHILD, "update.$inc.token": 1}),
    ("extend_pass: update on runs", "update", extends_pass),
    ("release_pass: update on runs", "update",
     {"update": "pikku_runs", "updates.0.q._id": RUN, "updates.0.q.token": 1,
      "updates.0.u.$set.lease_us": 0}),
    ("release_pass dropping copied journal entries: update on runs", "update",
     releases_dropping_a_copied_entry),
    ("start_step: update on runs", "update", Nth(1, starts_first_step)),
    # Outcomes ride in the run's journal (until 16 can go beside it together).
    *[(f"{write} carrying {what}: update on runs", "update", carries(key, starting=starting))
      for write, what, key, starting in CARRIED],
    # Outcomes going to their step documents (here: every one, the store told so) in the
    # command of the run write that carries them: a client-level bulkWrite, which
    # nx-27017 serves.
    *[(f"{write} carrying {what}: bulkWrite on runs and steps", "bulkWrite",
       rides(key, starting=starting))
      for write, what, key, starting in CARRIED],
    ("dispatch: insert into steps, claimed here", "insert",
     {"insert": "pikku_steps", "documents.0.key": "job"}),
    ("dispatched outcome: update on steps", "update",
     {"update": "pikku_steps", "updates.0.q.status.$eq": "running",
      "updates.0.u.$set.status": "succeeded"}),
    ("sleep armed: insert into steps", "insert",
     {"insert": "pikku_steps", "documents.0.key": "nap"}),
    ("sleep woken: update on runs", "update", Nth(1, TOLD)),
    ("event wait armed: insert into steps", "insert",
     {"insert": "pikku_steps", "documents.0.key": "go"}),
    ("event sent: insert into events", "insert", {"insert": "pikku_events"}),
    ("event sent, run told: update on runs", "update", Nth(2, TOLD)),
    # The first findAndModify on events looks before the event exists.
    ("event consumed: findAndModify on events", "findAndModify",
     Nth(2, {"findAndModify": "pikku_events"})),
    ("child step armed: insert into steps", "insert",
     {"insert": "pikku_steps", "documents.0.key": "kid"}),
    ("child settle carrying its step's outcome: update on runs", "update",
     {"update": "pikku_runs", "updates.0.q._id": CHILD, "updates.0.u.$set.status": "completed"}),
    ("parent's child step settled: update on steps", "update",
     {"update": "pikku_steps", "updates.0.q.status.$eq": "scheduled",
      "updates.0.u.$set.status": "succeeded"}),
    ("parent told of the child's end: update on runs", "update", tells_parent_of_a_change),
    ("child step marked notified: update on steps", "update",
     {"update": "pikku_steps", "updates.0.u": {"$set": {"notified": True}}}),
    ("save_steps, journal copy of the sleep: upsert on steps", "update",
     {"update": "pikku_steps", "updates.0.u.$set.key": "nap", "updates.0.upsert": True}),
    ("save_steps, journal copy of the event: upsert on steps", "update",
     {"update": "pikku_steps", "updates.0.u.$set.key": "go", "updates.0.upsert": True}),
    ("settle: update on runs", "update",
     {"update": "pikku_runs", "updates.0.q._id": RUN, "updates.0.u.$set.status": "completed"}),
    # Recovery sweeps every second: its first sweep's writes.
    ("recovery lease taken: findAndModify on leases", "findAndModify",
     Nth(1, {"findAndModify": "pikku_leases", "query._id": "workflow-recovery"})),
    ("recovery lease released: update on leases", "update",
     Nth(1, {"update": "pikku_leases", "updates.0.q._id": "workflow-recovery"})),
    ("lapsed claims requeued: update (multi) on steps", "update",
     Nth(1, {"update": "pikku_steps", "updates.0.multi": True})),
]  # fmt: skip


def executions(log: Path) -> Counter[str]:
    return Counter(r["step"] for r in read_log(str(log)) if r["kind"] == "start")


def bulk(collection: str, write: Callable[[dict[str, Any]], bool]) -> Where:
    """A group-committed bulk (an unordered command of several writes) on
    ``collection`` of which one write satisfies ``write``."""

    def where(command: dict[str, Any]) -> bool:
        name = next(iter(command))
        writes = command.get("documents") or command.get("updates") or []
        return (
            command[name] == collection
            and command.get("ordered") is False
            and len(writes) > 1
            and any(write(w) for w in writes)
        )

    return where


def riding_bulk(run_write: Callable[[dict[str, Any]], bool]) -> Where:
    """A group-committed client-level ``bulkWrite`` (ordered: each run's guarded upsert
    before its outcomes' step upserts) of several runs, one of whose run writes
    satisfies ``run_write`` and carries an outcome."""

    def where(command: dict[str, Any]) -> bool:
        ops = client_ops(command)
        runs = [u for ns, u in ops if ns == "pikku_runs"]
        return (
            command.get("ordered") is True
            and len(runs) > 1
            and any(u["upsert"] and run_write(u) for u in runs)
            and any(ns == "pikku_steps" for ns, _ in ops)
        )

    return where


def setting(update: dict[str, Any], prefix: str) -> bool:
    return any(name.startswith(prefix) for name in update["u"].get("$set", {}))


#: The same writes sent together by several runs at once (guarded ones as upserts).
BULK_WRITES: list[tuple[str, str, Where]] = [
    ("starts: bulk insert into runs", "insert", bulk("pikku_runs", lambda d: True)),
    ("start_step: bulk of guarded upserts on runs", "update", bulk("pikku_runs",
     lambda u: u["upsert"] and setting(u, "inflight.") and not setting(u, "journal."))),
    ("start_step carrying outcomes: bulk on runs", "update", bulk("pikku_runs",
     lambda u: u["upsert"] and setting(u, "inflight.") and setting(u, "journal."))),
    ("record_steps: bulk on runs", "update", bulk("pikku_runs",
     lambda u: u["upsert"] and not setting(u, "inflight.") and setting(u, "journal.")
     and "lease_us" not in u["u"]["$set"])),
    ("start_step carrying outcomes: ordered bulkWrite on runs and steps", "bulkWrite",
     riding_bulk(lambda u: setting(u, "inflight."))),
    ("record_steps: ordered bulkWrite on runs and steps", "bulkWrite",
     riding_bulk(lambda u: not setting(u, "inflight.") and "lease_us" not in u["u"]["$set"])),
    ("dispatches: bulk insert into steps, claimed here", "insert",
     bulk("pikku_steps", lambda d: d["kind"] == "dispatch")),
    ("dispatched outcomes: bulk on steps", "update", bulk("pikku_steps",
     lambda u: u["q"].get("status") == {"$eq": "running"}
     and u["u"].get("$set", {}).get("status") == "succeeded")),
    ("sleeps armed: bulk insert into steps", "insert",
     bulk("pikku_steps", lambda d: d["kind"] == "sleep")),
    ("release_pass: bulk on runs", "update", bulk("pikku_runs",
     lambda u: u["u"]["$set"].get("lease_us") == 0 and "status" not in u["u"]["$set"])),
    ("sleeps woken: bulk on runs", "update",
     bulk("pikku_runs", lambda u: u["u"] == {"$set": {"pending_pass": True}})),
    ("save_steps: bulk of upserts on steps", "update",
     bulk("pikku_steps", lambda u: u["upsert"] and "$lte" in u["q"].get("attempts", {}))),
    ("settles: bulk on runs", "update",
     bulk("pikku_runs", lambda u: u["u"]["$set"].get("status") == "completed")),
]  # fmt: skip

MANY = 6


def beside_from_the_first_step(engine: Engine, command: str) -> None:
    """For the cases of a client-level ``bulkWrite``: every outcome goes beside the run
    (by default outcomes ride in the run's journal until 16 can go together)."""
    if command == "bulkWrite":
        cast(MongoStore, engine.store).run_ops.beside_at = 1


@pytest.mark.parametrize(("what", "command", "where"), BULK_WRITES, ids=[w[0] for w in BULK_WRITES])
async def test_a_lost_reply_to_each_group_committed_bulk(
    proxied: Engine, proxy: FaultProxy, exec_log: Path, what: str, command: str, where: Where
) -> None:
    engine = proxied
    beside_from_the_first_step(engine, command)

    @engine.workflow("many")
    async def many(ctx: WorkflowContext, n: int) -> list[Any]:
        a = await ctx.step("a", work, "a", 0.01)
        b = await ctx.step("b", work, "b", 0.01)
        job = await ctx.dispatch("job", "fault-job", {"n": n, "seconds": 0.01}, retries=0)
        await ctx.sleep("nap", 0.2)
        return [a, b, job]

    rule = proxy.drop_reply(command, where)
    async with engine:
        runs = await asyncio.gather(
            *(engine.start("many", n, run_id=f"bulk-{n}") for n in range(MANY))
        )
        for n, run_id in enumerate(runs):
            assert await engine.result(run_id, timeout=60) == ["a", "b", f"job-{n}"]
    assert rule.hits, f"no {what} was seen: the scenario did not exercise it"
    assert proxy.stats["dropped"] == 1
    ran = Counter((r["run"], r["step"]) for r in read_log(str(exec_log)) if r["kind"] == "start")
    assert ran == {(run_id, step): 1 for run_id in runs for step in ("a", "b", "job")}
    await assert_no_step_ran_after_its_success(engine, runs, read_log(str(exec_log)))


@pytest.mark.parametrize(("what", "command", "where"), WRITES, ids=[w[0] for w in WRITES])
async def test_a_lost_reply_to_each_write(
    proxied: Engine, proxy: FaultProxy, exec_log: Path, what: str, command: str,
    where: Where | Nth,
) -> None:  # fmt: skip
    engine = proxied
    beside_from_the_first_step(engine, command)
    register_everything(engine)
    rule = proxy.drop_reply(command, where.fresh() if isinstance(where, Nth) else where)
    async with engine:
        await engine.start("everything", run_id=RUN)
        await wait_step(engine, RUN, "go", "scheduled")
        await engine.send_event(RUN, "go", "went")
        assert await engine.result(RUN, timeout=60) == ["a", "job-1", "went", "k"]
    assert rule.hits, f"no {what} was seen: the scenario did not exercise it"
    assert proxy.stats["dropped"] == 1
    assert executions(exec_log) == {"a": 1, "b": 1, "job": 1, "k": 1}
    await assert_no_step_ran_after_its_success(engine, [RUN, CHILD], read_log(str(exec_log)))


async def test_a_lost_reply_to_a_claim(proxied: Engine, proxy: FaultProxy, exec_log: Path) -> None:
    engine = proxied

    async def one_job(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.dispatch("job", "fault-job", {"n": 7, "seconds": 0.01}, retries=0)

    # The job is armed by an engine that cannot run it, so the first claim the proxy
    # sees from the worker is the one that takes it (an empty poll would match too).
    arming = Engine(engine.store, lease_ttl=engine.config.lease_ttl)
    arming.workflow("one-job")(one_job)
    engine.workflow("one-job")(one_job)
    async with arming:
        run_id = await arming.start("one-job")
        await wait_step(arming, run_id, "job", "scheduled")
    # A claim is a guarded update of the job, group-committed (a batch of one here).
    rule = proxy.drop_reply(
        "update",
        {"update": "pikku_steps", "updates.0.u.$set.status": "running",
         "updates.0.u.$inc.attempts": 1},
    )  # fmt: skip
    async with engine:
        assert await engine.result(run_id, timeout=30) == "job-7"
    assert rule.hits
    assert executions(exec_log) == {"job": 1}


async def test_a_lost_reply_to_cancel_still_cancels_the_children(
    proxied: Engine, proxy: FaultProxy
) -> None:
    engine = proxied

    @engine.workflow("parent")
    async def parent(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.child("kid", "waiting-kid", None)

    @engine.workflow("waiting-kid")
    async def waiting_kid(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.wait_for_event("never", timeout=600)

    async with engine:
        run_id = await engine.start("parent", run_id="parent-1")
        await wait_step(engine, "parent-1:kid", "never", "scheduled")
        rule = proxy.drop_reply(
            "findAndModify",
            {"findAndModify": "pikku_runs", "query._id": run_id, "update.$set.status": "cancelled"},
        )
        await engine.cancel(run_id)
        assert rule.hits
        assert (await engine.status(run_id)).status == "cancelled"
        assert (await engine.status("parent-1:kid")).status == "cancelled"


async def test_a_lost_reply_to_suspend(proxied: Engine, proxy: FaultProxy, exec_log: Path) -> None:
    engine = proxied

    @engine.workflow("napper")
    async def napper(ctx: WorkflowContext, data: Any) -> Any:
        await ctx.step("before", work, "before", 0.01)
        await ctx.sleep("nap", 1.0)
        return await ctx.step("after", work, "after", 0.01)

    async with engine:
        run_id = await engine.start("napper")
        await wait_step(engine, run_id, "nap", "scheduled")
        rule = proxy.drop_reply(
            "findAndModify", {"findAndModify": "pikku_runs", "update.$set.status": "suspended"}
        )
        await engine.suspend(run_id)
        assert rule.hits
        assert (await engine.status(run_id)).status == "suspended"
        await asyncio.sleep(2.5)  # the sleep is due and recovery sweeps: nothing may start
        assert executions(exec_log) == {"before": 1}
        assert (await engine.status(run_id)).status == "suspended"
        await engine.resume(run_id)
        assert await engine.result(run_id, timeout=30) == "after"
    assert executions(exec_log) == {"before": 1, "after": 1}


async def test_a_lost_reply_to_the_move_to_compensating(
    proxied: Engine, proxy: FaultProxy, exec_log: Path
) -> None:
    engine = proxied

    async def refund(charge: Any) -> None:
        record("refund")

    async def boom() -> None:
        raise RuntimeError("declined")

    @engine.workflow("saga")
    async def saga(ctx: WorkflowContext, data: Any) -> Any:
        await ctx.step("charge", work, "charge", 0.01, compensate=refund)
        await ctx.step("ship", boom)

    rule = proxy.drop_reply(
        "update", {"update": "pikku_runs", "updates.0.u.$set.status": "compensating"}
    )
    async with engine:
        run_id = await engine.start("saga")
        deadline = time.monotonic() + 20
        while (await engine.status(run_id)).status not in ("compensated", "failed"):
            assert time.monotonic() < deadline, (
                f"run stuck {(await engine.status(run_id)).status} (reply dropped: "
                f"{bool(rule.hits)})"
            )
            await asyncio.sleep(0.1)
    assert rule.hits
    assert (await engine.status(run_id)).status == "compensated"
    assert sum(1 for r in read_log(str(exec_log)) if r["kind"] == "refund") == 1
