"""Journal pages (``pikku_mongo.writes.journal_pages``): a long run's final inline outcomes
leave the run's journal in pages of several outcomes, and every reader of the run's
steps (a replay after a park, ``status``, ``fork``, a dry replay) sees them as if each
had its own step document."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from engine_core import Engine, WorkflowContext, WorkflowRunFailedError
from engine_core.testing.builders import done_step
from pikku_mongo import MongoStore
from pikku_mongo.wire.documents import step_to_doc
from pikku_mongo.wire.journal_text import step_to_text
from pikku_mongo.writes.journal_pages import PAGE, page_upsert, steps_of_docs
from tests.conftest import mongo_store

STEPS = 40


async def page_docs(store: MongoStore, run_id: str) -> list[dict[str, Any]]:
    return await store.steps.find({"run_id": run_id, PAGE: {"$exists": True}}).to_list()


async def step_docs(store: MongoStore, run_id: str) -> list[str]:
    docs = await store.steps.find({"run_id": run_id, PAGE: {"$exists": False}}).to_list()
    return sorted(doc["key"] for doc in docs)


@pytest.fixture
async def store(nx_uri: str) -> Any:
    store = await mongo_store(nx_uri)
    yield store
    await store.close()


async def test_a_long_run_replays_from_its_pages_without_running_a_step_twice(
    store: MongoStore,
) -> None:
    ran: list[str] = []
    undo: list[int] = []
    failures = {"flaky": 1}

    async def work(name: str, value: int) -> int:
        ran.append(name)
        if failures.get(name):
            failures[name] -= 1
            raise RuntimeError("once")
        return value

    async def compensate(value: int) -> None:
        undo.append(value)

    engine = Engine(store)

    @engine.workflow("long")
    async def long(ctx: WorkflowContext, n: int) -> int:
        total: int = 0
        for i in range(n):
            total += await ctx.step(f"s{i}", work, f"s{i}", i)
        total += await ctx.step("flaky", work, "flaky", 1000, retries=1, retry_delay=0)
        total += await ctx.step("undoable", work, "undoable", 7, compensate=compensate)
        await ctx.sleep("nap", 0.2)  # parks: the next pass replays every step from the store
        for i in range(n, n + 20):
            total += await ctx.step(f"s{i}", work, f"s{i}", i)
        return total

    async with engine:
        run_id = await engine.start("long", STEPS)
        expected = sum(range(STEPS + 20)) + 1000 + 7
        assert await engine.result(run_id, timeout=60) == expected
    assert sorted(ran) == sorted(
        [f"s{i}" for i in range(STEPS + 20)] + ["flaky", "flaky", "undoable"]
    ), "a step ran twice, or not at all"

    pages = await page_docs(store, run_id)
    assert len(pages) >= 2, "the long run wrote no pages"
    # Only what may change again has a document of its own: the step that failed once,
    # the compensable one, the sleep.
    assert set(await step_docs(store, run_id)) <= {"flaky", "undoable", "nap"}
    status = await engine.status(run_id)
    assert len(status.steps) == STEPS + 20 + 3
    assert all(s.status == "succeeded" for s in status.steps.values())
    assert status.steps["s5"].result == 5 and status.steps["flaky"].attempts == 2
    assert undo == []

    # A fork from a step past the first page copies the paged steps before it.
    ran.clear()
    async with engine:
        fork_id = await engine.fork(run_id, from_step=f"s{STEPS + 5}")
        assert await engine.result(fork_id, timeout=60) == expected
    assert sorted(ran) == sorted(f"s{i}" for i in range(STEPS + 5, STEPS + 20))
    report = await engine.replay_check(run_ids=[run_id], include_ended=True)
    assert report.checked == 1 and report.diverged == []


async def test_a_failed_step_is_never_paged(store: MongoStore) -> None:
    ran: list[str] = []

    async def boom() -> None:
        ran.append("boom")
        raise RuntimeError("no")

    async def ok(i: int) -> int:
        ran.append(f"s{i}")
        return i

    engine = Engine(store)

    @engine.workflow("fails-late")
    async def fails_late(ctx: Any, n: int) -> None:
        for i in range(n):
            await ctx.step(f"s{i}", ok, i)
        await ctx.step("boom", boom)

    async with engine:
        run_id = await engine.start("fails-late", 30)
        with pytest.raises(WorkflowRunFailedError):
            await engine.result(run_id, timeout=60)
        assert len(await page_docs(store, run_id)) >= 1
        # The failed step is not in a page: a retry of the run finds it by its _id.
        assert await store.get_step(run_id, "boom") is not None or "boom" in (
            (await store.get_run(run_id)).journal  # type: ignore[union-attr]
        )
        ran.clear()
        await engine.retry(run_id)
        with pytest.raises(WorkflowRunFailedError):
            await engine.result(run_id, timeout=60)
    assert ran == ["boom"], "a retry ran a paged step again, or not the failed one"


def test_a_step_document_wins_over_a_page_unless_the_page_is_later() -> None:
    first, later = done_step("r", "a"), done_step("r", "a")
    later.attempts = first.attempts + 1
    later.result = "later"
    _, page = page_upsert("r", [step_to_text(later), step_to_text(done_step("r", "b"))])
    doc = {"_id": "p", **page["$set"]}
    # The page holds a later attempt of "a" than its step document: the page's wins.
    steps = {s.key: s for s in steps_of_docs([step_to_doc(first), doc])}
    assert steps["a"].result == "later" and set(steps) == {"a", "b"}
    # The same attempt in both: the step document's (it is the one that can change).
    first.attempts = later.attempts
    first.result = "doc"
    steps = {s.key: s for s in steps_of_docs([doc, step_to_doc(first)])}
    assert steps["a"].result == "doc"
    lean = {s.key: s for s in steps_of_docs([doc, step_to_doc(first)], lean=True)}
    assert lean["a"].result == "doc" and lean["b"].status == "succeeded"


def test_a_page_written_again_is_the_same_document() -> None:
    outcomes = [step_to_text(done_step("r", "a")), step_to_text(done_step("r", "b"))]
    assert page_upsert("r", outcomes) == page_upsert("r", outcomes)
    assert page_upsert("r", outcomes)[0] != page_upsert("r", outcomes[:1])[0]


@pytest.mark.parametrize("after", [3, 20])
async def test_a_step_retried_after_a_delay_leaves_no_sleep_due(
    store: MongoStore, after: int
) -> None:
    """A step whose first attempt failed waited for its retry in a step document
    (``scheduled``): its success goes over that document by the time the pass ends,
    whether it stayed in the run's journal (a short run) or left it among 16 (never
    into a page), so the recovery sweep finds nothing due."""
    failures = {"flaky": 1}

    async def work(name: str, value: int) -> int:
        if failures.get(name):
            failures[name] -= 1
            raise RuntimeError("once")
        return value

    engine = Engine(store)

    @engine.workflow("parks-late")
    async def parks_late(ctx: WorkflowContext, n: int) -> None:
        await ctx.step("flaky", work, "flaky", 1, retries=1, retry_delay=1.1)
        for i in range(n):
            await ctx.step(f"s{i}", work, f"s{i}", i)
        await ctx.sleep("long", 3600)

    async with engine:
        run_id = await engine.start("parks-late", after)
        for _ in range(300):
            steps = (await engine.status(run_id)).steps
            if "long" in steps and "long" not in (await store.get_run(run_id)).inflight:  # type: ignore[union-attr]
                break
            await asyncio.sleep(0.05)
        assert steps["flaky"].attempts == 2 and steps[f"s{after - 1}"].status == "succeeded"
    assert len(await page_docs(store, run_id)) == (1 if after > 16 else 0)
    flaky = await store.get_step(run_id, "flaky")
    assert flaky is not None and (flaky.status, flaky.attempts) == ("succeeded", 2)
    report = await Engine(store).recover()
    assert report.woken == 0, report.summary()
