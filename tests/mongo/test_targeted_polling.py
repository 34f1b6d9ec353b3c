"""Targeted polling (docs/guides/sharding.md, :mod:`pikku_mongo.store.job_index`,
:mod:`pikku_mongo.store.line_index`): a worker's and an admitter's polls read no sharded
collection without its shard key; a process killed between a job's insert and its index
entry, or between its claims and the index cleanup, strands no job past one recovery sweep
and runs none twice; the setting is off by topology on a replica set and checked."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

import pytest

from engine_core import Engine, WorkflowContext
from engine_core.testing.builders import make_job, make_run
from pikku_mongo import MongoStore
from tests.conftest import mongo_store, with_database
from tests.support.poll_check import PollListener, polling
from tests.support.shard_key_check import ShardKeyListener

SERVERS = ["nx_uri", "mongoeco_uri"]
#: The store methods a worker's and an admitter's polls call at every turn.
POLLS = ("claim_steps", "queued_runs", "get_queue_state", "get_runs", "admit_runs")


def store_uri(request: pytest.FixtureRequest, server: str) -> str:
    return str(request.getfixturevalue(server))


def _watch_polls(store: MongoStore) -> None:
    """Mark the commands each poll method of ``store`` sends (see ``poll_check``)."""
    for name in POLLS:
        method = getattr(store, name)

        def marked(*args: Any, _name: str = name, _method: Any = method, **kw: Any) -> Any:
            async def call() -> Any:
                with polling(_name):
                    return await _method(*args, **kw)

            return call()

        setattr(store, name, marked)


@pytest.mark.parametrize("server", SERVERS)
async def test_polls_of_a_worker_and_an_admitter_read_by_shard_key(
    request: pytest.FixtureRequest, server: str
) -> None:
    polls, shard_keys = PollListener(), ShardKeyListener()
    listeners = [polls, shard_keys]
    front = await mongo_store(
        request.getfixturevalue(server), targeted_polling=True, event_listeners=listeners
    )
    uri = with_database(request.getfixturevalue(server), front.database.name)
    back = MongoStore.from_uri(
        uri, targeted_polling=True, max_clock_skew=0, event_listeners=listeners
    )
    await back.init()
    for store in (front, back):
        _watch_polls(store)
    orchestrator = Engine(front, lease_ttl="5s")  # admits and drives the runs
    worker = Engine(back, lease_ttl="5s")  # runs the step function only
    orchestrator.queue("q", concurrency=2)

    @orchestrator.workflow("w")
    async def w(ctx: WorkflowContext, n: int) -> int:
        return int(await ctx.dispatch("inc", "inc", n))

    @worker.step_function("inc")
    async def inc(n: int) -> int:
        return n + 1

    async with worker, orchestrator:
        ids = [await orchestrator.start("w", i, queue="q") for i in range(6)]
        assert [await orchestrator.result(r, timeout=60) for r in ids] == list(range(1, 7))
    assert polls.polled > 0
    assert polls.violations == [], "\n".join(polls.violations)
    assert shard_keys.violations == [], "\n".join(shard_keys.violations)
    assert await front.jobs.count_documents({}) == 0  # every entry claimed and dropped
    await back.close()
    await front.close()


# Inserts a job with its index entry held back (or claims a job with the cleanup held
# back), says so, then hangs there until killed.
_CHILD = """
import asyncio, sys
from engine_core.testing.builders import make_job, make_run
from pikku_mongo import MongoStore

async def main() -> None:
    store = MongoStore.from_uri(sys.argv[1], max_clock_skew=0, targeted_polling=True)
    async def hang(*args, **kwargs):
        print("there", flush=True)
        await asyncio.Event().wait()
    if sys.argv[2] == "insert":
        store.job_index.add = hang
        await store.insert_step(make_job("r", "lost"))
    elif sys.argv[2] == "line":
        store.line_index.add = hang
        await store.insert_run(make_run("lost", status="queued", queue="q"))
    else:
        await store.insert_step(make_job("r", "a", due_in=-3))
        await store.insert_step(make_job("r", "b", due_in=-2))
        store.job_index.drop = hang
        await store.claim_steps(["fn"], holder="dead", claim_ttl=0.2, limit=1)

asyncio.run(main())
"""


async def _kill_when_there(uri: str, where: str) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _CHILD, uri, where, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        assert (await child.stdout.readline()).strip() == b"there"
    finally:
        child.kill()
        await child.wait()


@pytest.mark.parametrize("server", SERVERS)
async def test_a_job_whose_entry_died_with_its_process_is_claimed_after_one_sweep(
    request: pytest.FixtureRequest, server: str
) -> None:
    store = await mongo_store(request.getfixturevalue(server), targeted_polling=True)
    await _kill_when_there(
        with_database(request.getfixturevalue(server), store.database.name), "insert"
    )
    stored = await store.get_step("r", "lost")
    assert stored is not None and stored.status == "scheduled"
    claim: Callable[[], Any] = lambda: store.claim_steps(  # noqa: E731
        ["fn"], holder="w", claim_ttl=30, limit=10
    )
    assert await claim() == []  # no entry: the poll cannot see it...
    assert await store.requeue_lapsed_claims() == 0  # ...until the recovery sweep
    won = await claim()
    assert [(j.key, j.attempts) for j in won] == [("lost", 1)]
    assert await claim() == [] and await store.requeue_lapsed_claims() == 0
    assert await claim() == []  # claimed once
    await store.close()


@pytest.mark.parametrize("server", SERVERS)
async def test_claims_whose_cleanup_died_with_their_process_run_once_each(
    request: pytest.FixtureRequest, server: str
) -> None:
    store = await mongo_store(request.getfixturevalue(server), targeted_polling=True)
    await _kill_when_there(
        with_database(request.getfixturevalue(server), store.database.name), "claim"
    )
    taken = await store.get_step("r", "a")
    assert taken is not None and taken.claim_holder == "dead" and taken.attempts == 1
    assert await store.jobs.count_documents({}) == 2  # the claimed job's entry stayed
    won = await store.claim_steps(["fn"], holder="live", claim_ttl=30, limit=10)
    assert [j.key for j in won] == ["b"]  # the stale entry is not claimed, but dropped
    assert await store.jobs.count_documents({}) == 0
    await asyncio.sleep(0.3)  # the dead claim lapses; the sweep puts it back
    assert await store.requeue_lapsed_claims() == 1
    again = await store.claim_steps(["fn"], holder="live", claim_ttl=30, limit=10)
    assert [(j.key, j.attempts, j.claim_holder) for j in again] == [("a", 2, "live")]
    assert await store.claim_steps(["fn"], holder="live", claim_ttl=30, limit=10) == []
    await store.close()


@pytest.mark.parametrize("server", SERVERS)
async def test_a_run_whose_line_entry_died_with_its_process_is_admitted_after_one_sweep(
    request: pytest.FixtureRequest, server: str
) -> None:
    store = await mongo_store(store_uri(request, server), targeted_polling=True)
    await store.insert_run(make_run("first", status="queued", queue="q"))
    await _kill_when_there(with_database(store_uri(request, server), store.database.name), "line")
    assert (await store.get_run("lost")) is not None
    assert [r.run_id for r in await store.queued_runs("q", limit=10)] == ["first"]
    assert await store.requeue_lapsed_claims() == 0  # the recovery sweep
    assert [r.run_id for r in await store.queued_runs("q", limit=10)] == ["first", "lost"]
    assert await store.admit_runs(await store.queued_runs("q", limit=10)) == 2
    assert await store.queued_runs("q", limit=10) == []  # admitted once; entries dropped
    assert await store.lines.count_documents({}) == 0
    await store.close()


async def test_a_job_back_on_the_queue_gets_its_entry_at_once(nx_uri: str) -> None:
    from engine_core.records import StepGuard

    store = await mongo_store(nx_uri, targeted_polling=True)
    await store.insert_step(make_job("r", "s"))
    [job] = await store.claim_steps(["fn"], holder="w", claim_ttl=30, limit=1)
    # A retry later: the job is scheduled again, and its entry written with it.
    assert await store.update_step(
        "r",
        "s",
        guard=StepGuard(status_in=("running",), attempts=1, claim_holder="w"),
        changes={"status": "scheduled", "claim_holder": None, "due_at": job.updated_at},
    )
    [again] = await store.claim_steps(["fn"], holder="w", claim_ttl=30, limit=1)
    assert again.attempts == 2
    await store.close()


async def test_off_by_topology_on_a_replica_set_and_checked(nx_uri: str) -> None:
    store = await mongo_store(nx_uri)
    assert store.targeted_polling is None and store.job_index is None
    await store.insert_step(make_job("r", "s"))
    assert len(await store.claim_steps(["fn"], holder="w", claim_ttl=30, limit=1)) == 1
    assert "pikku_jobs" not in await store.database.list_collection_names()
    await store.close()
    with pytest.raises(TypeError, match="targeted_polling must be True, False or None"):
        MongoStore.from_uri(with_database(nx_uri, "x"), targeted_polling="yes")  # type: ignore[arg-type]


async def test_the_check_flags_the_polls_of_an_untargeted_store(nx_uri: str) -> None:
    polls = PollListener()
    store = await mongo_store(nx_uri, targeted_polling=False, event_listeners=[polls])
    _watch_polls(store)
    await store.claim_steps(["fn"], holder="w", claim_ttl=30, limit=1)
    await store.queued_runs("q", limit=10)
    assert [v.split(":")[0] for v in polls.violations] == ["claim_steps", "queued_runs"]
    assert "pikku_steps" in polls.violations[0] and "pikku_runs" in polls.violations[1]
    await store.close()


# A run whose pass dispatches a job to a function served elsewhere, and dies between the
# job's insert and its index entry.
_DISPATCHER = """
import asyncio, sys
from engine_core import Engine
from pikku_mongo import MongoStore

async def main() -> None:
    store = MongoStore.from_uri(sys.argv[1], max_clock_skew=0, targeted_polling=True)
    engine = Engine(store, lease_ttl="1s")

    @engine.workflow("w")
    async def w(ctx, n):
        return await ctx.dispatch("inc", "inc", n)

    async def hang(*args, **kwargs):
        print("there", flush=True)
        await asyncio.Event().wait()

    store.job_index.add = hang
    async with engine:
        await engine.start("w", 1, run_id="crashed")
        await asyncio.Event().wait()

asyncio.run(main())
"""


async def test_a_fleet_runs_once_the_job_of_a_process_killed_before_its_entry(
    nx_uri: str,
) -> None:
    store = await mongo_store(nx_uri, targeted_polling=True)
    uri = with_database(nx_uri, store.database.name)
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _DISPATCHER, uri, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        assert (await child.stdout.readline()).strip() == b"there"
    finally:
        child.kill()  # between the job's insert and its entry
        await child.wait()
    assert await store.jobs.count_documents({}) == 0
    calls: list[int] = []
    engine = Engine(store, lease_ttl="1s", recovery_interval="1s")

    @engine.workflow("w")
    async def w(ctx: WorkflowContext, n: int) -> int:
        return int(await ctx.dispatch("inc", "inc", n))

    @engine.step_function("inc")
    async def inc(n: int) -> int:
        calls.append(n)
        return n + 1

    async with engine:  # takes the run over; a recovery sweep gives the job its entry
        assert await engine.result("crashed", timeout=60) == 2
    assert calls == [1]
    await store.close()


async def test_on_by_topology_through_a_mongos(
    nx_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pikku_mongo.store.mongo_store as store_module

    async def mongos_hello(database: Any) -> dict[str, Any]:
        return {"msg": "isdbgrid", "ok": 1}  # what a mongos answers (no sharded server here)

    monkeypatch.setattr(store_module, "hello", mongos_hello)
    store = await mongo_store(nx_uri)
    assert store.targeted_polling is None
    assert store.job_index is not None and store.line_index is not None
    await store.insert_step(make_job("r", "s"))
    assert await store.jobs.count_documents({}) == 1
    assert len(await store.claim_steps(["fn"], holder="w", claim_ttl=30, limit=1)) == 1
    await store.close()
