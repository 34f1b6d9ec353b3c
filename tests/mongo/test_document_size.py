"""A write the 16 MiB BSON limit refuses fails at once, with a specific error, and is
never retried: on both wire servers, for an insert and for an update that would grow a
step past the limit."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import monitoring

from engine_core.common.clock import utcnow
from engine_core.records import AttemptEntry, RunRecord, StepGuard, StepRecord
from pikku_mongo import MongoStore
from pikku_mongo.errors import DocumentTooLargeError, PikkuMongoError
from tests.conftest import mongo_store

MIB = 1024 * 1024


class Writes(monitoring.CommandListener):
    def __init__(self) -> None:
        self.names: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name in ("insert", "update", "findAndModify"):
            self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.fixture(params=["nx", "mongoeco"])
async def sized(request: pytest.FixtureRequest) -> AsyncIterator[tuple[MongoStore, Writes]]:
    writes = Writes()
    store = await mongo_store(request.getfixturevalue(f"{request.param}_uri"),
                              event_listeners=[writes])  # fmt: skip
    yield store, writes
    await store.close()


async def test_an_oversized_run_is_refused_once_and_clearly(
    sized: tuple[MongoStore, Writes], caplog: pytest.LogCaptureFixture
) -> None:
    store, writes = sized
    now = utcnow()
    run = RunRecord(run_id="big", workflow="w", status="running", input="x" * (17 * MIB),
                    created_at=now, updated_at=now)  # fmt: skip
    began = time.monotonic()
    with pytest.raises(DocumentTooLargeError, match="16 MiB") as caught:
        await store.insert_run(run)
    assert time.monotonic() - began < 2
    assert isinstance(caught.value, PikkuMongoError) and isinstance(caught.value, ValueError)
    assert "insert_run" in str(caught.value)
    assert writes.names.count("insert") <= 1  # the driver refuses before sending
    assert not [r for r in caplog.records if "retrying" in r.getMessage()]
    assert await store.get_run("big") is None


async def test_an_update_that_would_grow_a_step_past_the_limit_is_not_retried(
    sized: tuple[MongoStore, Writes], caplog: pytest.LogCaptureFixture
) -> None:
    store, writes = sized
    # An error message of 9 MiB, stored twice (the step's error and its history entry):
    # issue 12 case 7. The store refuses it at once; the engine decides what to keep.
    error: dict[str, Any] = {"type": "Boom", "message": "m" * (9 * MIB)}
    await store.insert_step(
        StepRecord(run_id="r", key="s", kind="inline", status="running", attempts=1)
    )
    updates_before = writes.names.count("update")
    began = time.monotonic()
    with pytest.raises(DocumentTooLargeError, match="update_step"):
        await store.update_step(
            "r", "s",
            guard=StepGuard(attempts=1),
            changes={"kind": "inline", "status": "failed", "attempts": 1, "error": error},
            entry=AttemptEntry(attempt=1, status="failed", at=utcnow(), error=error),
        )  # fmt: skip
    assert time.monotonic() - began < 2
    assert writes.names.count("update") - updates_before <= 1
    assert not [r for r in caplog.records if "retrying" in r.getMessage()]
    stored = await store.get_step("r", "s")
    assert stored is not None and stored.status == "running" and stored.error is None
