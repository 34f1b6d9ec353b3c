"""Issue 19 case 3: outcomes too many or too large for one write are never dropped.

A wide fan-out (300 inline steps under ``asyncio.gather``, 60 KB each: about 18 MB of
outcomes at once) is split so that no write is over the server's limits, the run's
journal stays within its bound, and every outcome lands; a single outcome that cannot
be stored at all fails its step with ``DocumentTooLargeError``; a write that fails in
the background never lets the run complete. On nx-27017 (a real wire server)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from bson import BSON
from pymongo import monitoring

from engine_core import Engine, StepFailedError, WorkflowContext, current_step
from engine_core.common.journal import JOURNAL_BYTES
from engine_core.common.values import MAX_VALUE_BYTES
from engine_core.errors import StoreUnavailableError
from pikku_mongo import MongoStore
from pikku_mongo.wire.journal_text import step_from_text
from tests.conftest import with_database

WIDTH = 300
SIZE = 60_000
#: The server's limits (MongoDB's; nx-27017 reports the same).
MAX_DOCUMENT = 16 * 1024 * 1024
MAX_MESSAGE = 48_000_000


class WriteSizes(monitoring.CommandListener):
    """The size of every write command, and of its largest document or update."""

    def __init__(self) -> None:
        self.commands: list[int] = []
        self.largest = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name not in ("insert", "update", "findAndModify"):
            return
        command = event.command
        self.commands.append(len(BSON.encode(command)))
        for op in command.get("documents", []) or []:
            self.largest = max(self.largest, len(BSON.encode(op)))
        for op in command.get("updates", []) or []:
            self.largest = max(self.largest, len(BSON.encode(op)))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def _store(uri: str, database: str, listener: WriteSizes | None = None) -> MongoStore:
    return MongoStore.from_uri(
        with_database(uri, database), event_listeners=[listener] if listener else [],
        max_clock_skew=0,
    )  # fmt: skip


def block(i: int) -> str:
    return f"{i:04d}" + "x" * (SIZE - 4)


def _fan_out(engine: Engine, calls: list[int]) -> None:
    def step(i: int) -> str:
        calls.append(i)
        return block(i)

    @engine.workflow("wide")
    async def wide(ctx: WorkflowContext, data: Any) -> int:
        results = await asyncio.gather(*(ctx.step(f"s{i}", step, i) for i in range(WIDTH)))
        await ctx.wait_for_event("go")
        return sum(r == block(i) for i, r in enumerate(results))


async def test_a_wide_fan_out_records_every_outcome(nx_uri: str) -> None:
    database = f"wo_{uuid.uuid4().hex[:10]}"
    sizes = WriteSizes()
    store = _store(nx_uri, database, sizes)
    calls: list[int] = []
    engine = Engine(store, lease_ttl="30s")
    _fan_out(engine, calls)
    async with engine:
        run_id = await engine.start("wide")
        for _ in range(1200):
            status = await engine.status(run_id)
            if status.status != "running" or "go" in status.steps:
                break
            await asyncio.sleep(0.1)
    assert sorted(calls) == list(range(WIDTH))
    status = await engine.status(run_id)
    assert status.status == "running", status.error
    done = [s for s in status.steps.values() if s.status == "succeeded"]
    assert len(done) == WIDTH
    # No write over the server's limits, and the run's record within its bound.
    print(f"{len(sizes.commands)} writes, largest {max(sizes.commands)} bytes, "
          f"largest document {sizes.largest} bytes")  # fmt: skip
    assert max(sizes.commands) < MAX_MESSAGE
    assert sizes.largest < MAX_DOCUMENT
    raw = await store.runs.find_one({})
    assert raw is not None
    fields = {f: len(BSON.encode({f: v})) for f, v in raw.items()}
    entries = len(raw.get("journal") or {})
    assert len(BSON.encode(raw)) < JOURNAL_BYTES + 64 * 1024, (entries, fields)
    await store.close()

    # Another process replays the run from what was stored: every result is there, and
    # no step runs again.
    calls.clear()
    store = _store(nx_uri, database)
    again = Engine(store, lease_ttl="30s")
    _fan_out(again, calls)
    async with again:
        await again.send_event(run_id, "go", None)
        assert await again.result(run_id, timeout=120) == WIDTH
    assert calls == []
    status = await again.status(run_id)
    assert status.status == "completed"
    assert sum(s.status == "succeeded" for k, s in status.steps.items() if k != "go") == WIDTH
    assert all(s.result == block(int(k[1:])) for k, s in status.steps.items() if k != "go")
    await store.close()


async def test_a_wide_fan_out_that_ends_the_run_records_every_outcome(nx_uri: str) -> None:
    # The issue's own case: the body returns right after the gather, so the outcomes go
    # with the write that settles the run.
    store = _store(nx_uri, f"wo_{uuid.uuid4().hex[:10]}")
    engine = Engine(store, lease_ttl="30s")

    @engine.workflow("wide")
    async def wide(ctx: WorkflowContext, data: Any) -> int:
        results = await asyncio.gather(*(ctx.step(f"s{i}", block, i) for i in range(WIDTH)))
        return sum(r == block(i) for i, r in enumerate(results))

    async with engine:
        run_id = await engine.start("wide")
        assert await engine.result(run_id, timeout=120) == WIDTH
    status = await engine.status(run_id)
    assert sum(s.status == "succeeded" for s in status.steps.values()) == WIDTH
    assert all(s.result == block(int(k[1:])) for k, s in status.steps.items())
    await store.close()


async def test_an_outcome_the_store_cannot_keep_fails_its_step(nx_uri: str) -> None:
    # A result under the engine's own bound for one value, on a step whose history of
    # failed attempts (each error cut to 32 KB, and kept) takes its record past 16 MiB.
    failures = 45

    def grows() -> str:
        info = current_step()
        assert info is not None
        if info.attempt <= failures:
            raise RuntimeError("m" * 100_000)
        return "x" * (MAX_VALUE_BYTES - 2000)

    store = _store(nx_uri, f"wo_{uuid.uuid4().hex[:10]}")
    # Its values kept in its documents, none in GridFS (as before offload_over), so the
    # record's size comes from the step itself: the server refuses it.
    store.offload_over_bytes = None  # type: ignore[assignment]
    engine = Engine(store, lease_ttl="30s")

    @engine.workflow("big")
    async def big(ctx: WorkflowContext, data: Any) -> Any:
        await ctx.step("small", lambda: "fine")
        try:
            value = await ctx.step("big", grows, retries=failures + 5, retry_delay=0)
        except StepFailedError as exc:
            return [exc.error_type, str(exc)]
        return len(value)

    async with engine:
        run_id = await engine.start("big")
        error_type, message = await engine.result(run_id, timeout=120)
    assert error_type == "DocumentTooLargeError" and "16 MiB" in message
    status = await engine.status(run_id)
    assert status.status == "completed"
    assert status.steps["small"].result == "fine"
    step = status.steps["big"]
    assert step.status == "failed" and step.attempts == failures + 1 and step.result is None
    assert step.error is not None and step.error["type"] == "DocumentTooLargeError"
    await store.close()


async def test_outcomes_a_failed_write_may_have_left_in_the_journal_leave_it(
    nx_uri: str,
) -> None:
    """A background write journals 15 outcomes and lands, but its caller is told it
    failed (its reply lost, the retries given up): the outcomes are given back, and the
    write that carries them again, to their step records with 15 more, drops them from
    the run's journal. (Before, they stayed there uncounted and the journal could grow
    past its room: the wide fan-out above failed so, once, under load.)"""
    store = _store(nx_uri, f"wo_{uuid.uuid4().hex[:10]}")
    real = store.record_steps
    failed: list[int] = []

    async def record_steps(run_id: str, **kwargs: Any) -> bool:
        landed = await real(run_id, **kwargs)
        if not failed and 0 < len(kwargs["outcomes"]) < store.run_ops.beside_at:
            failed.append(len(kwargs["outcomes"]))
            raise StoreUnavailableError("the reply was lost (the test)")
        return landed

    store.record_steps = record_steps  # type: ignore[method-assign]
    engine = Engine(store)

    async def step(i: int) -> int:
        if i >= 15:
            await asyncio.sleep(0.2)  # the first 15 are carried alone
        return i

    @engine.workflow("halves")
    async def halves(ctx: WorkflowContext, data: Any) -> int:
        await asyncio.gather(*(ctx.step(f"g{i}", step, i) for i in range(30)))
        await ctx.step("after", step, 0)
        return 1

    async with engine:
        run_id = await engine.start("halves")
        assert await engine.result(run_id, timeout=30) == 1
    assert failed == [15]
    raw = await store.runs.find_one({"_id": run_id})
    assert raw is not None
    left = [step_from_text(run_id, t).key for t in (raw.get("journal") or {}).values()]
    assert not [k for k in left if k.startswith("g")], left
    status = await Engine(store).status(run_id)
    assert all(status.steps[f"g{i}"].result == i for i in range(30))
    await store.database.client.drop_database(store.database.name)
    await store.close()
