"""The dedup guarantee in its own collection (docs/guides/sharding.md): a claim orphaned
by a process killed between the claim and the run's insert is reclaimed; the format 3
migration moves live runs' dedup ids into claims and drops the unique index that blocks
sharding; a start with a dedup id costs at most one command more than one without."""

from __future__ import annotations

import asyncio
import sys
import uuid
from typing import Any

import pytest
from pymongo import monitoring

import pikku_mongo.store.dedup_ops as dedup_ops
from engine_core import DuplicateRunError, Engine, WorkflowContext
from engine_core.testing.builders import make_run
from pikku_mongo import MongoStore
from pikku_mongo.wire.encoding import pack
from pikku_mongo.wire.flow_fields import dedup_key
from tests.conftest import mongo_store, with_database

# Claims, then hangs where the run's insert would be sent, until killed.
_STARTER = """
import asyncio, sys
from engine_core.testing.builders import make_run
from pikku_mongo import MongoStore

async def main() -> None:
    store = MongoStore.from_uri(sys.argv[1], max_clock_skew=0)
    async def hang(doc, confirm=None):
        print("claimed", flush=True)
        await asyncio.Event().wait()
    store.run_writes.insert = hang
    await store.insert_run(make_run("orphan", status="queued", queue="q", dedup_id="d"))

asyncio.run(main())
"""


async def test_a_claim_orphaned_by_a_killed_start_is_reclaimed(
    nx_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await mongo_store(nx_uri)
    uri = with_database(nx_uri, store.database.name)
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _STARTER, uri, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        assert (await child.stdout.readline()).strip() == b"claimed"
    finally:
        child.kill()  # between the claim and the run's insert
        await child.wait()
    assert await store.get_run("orphan") is None
    # Young, the claim is the killed start's: it may have been about to insert.
    with pytest.raises(DuplicateRunError) as held:
        await store.insert_run(make_run("next", status="queued", queue="q", dedup_id="d"))
    assert held.value.run_id == "orphan"
    assert await store.dedup_holder("q", "d") == "orphan"
    # Past the orphan bound, it is taken over: the next start lands, and holds it.
    monkeypatch.setattr(dedup_ops, "ORPHAN_AFTER_S", 0.0)
    assert (
        await store.insert_run(make_run("next", status="queued", queue="q", dedup_id="d")) is None
    )
    assert await store.dedup_holder("q", "d") == "next"
    with pytest.raises(DuplicateRunError):
        await store.insert_run(make_run("third", status="queued", queue="q", dedup_id="d"))
    await store.close()


async def test_the_migration_moves_dedup_ids_to_claims_and_drops_the_unique_index(
    nx_uri: str,
) -> None:
    store = await mongo_store(nx_uri)
    await store.insert_run(make_run("live", status="queued", queue="q", dedup_id="d"))
    # The database as format 2 left it: the unique index, no claims.
    await store.dedup.delete_many({})
    await store.runs.create_index([("dedup", 1)], unique=True, sparse=True)
    await store.meta.update_one({"_id": "format"}, {"$set": {"version": 2}})
    await store.init()
    indexes = await store.runs.index_information()
    assert not [name for name, spec in indexes.items() if spec.get("unique")]
    claim = await store.dedup.find_one({"_id": dedup_key("q", "d")})
    assert claim is not None and claim["run_id"] == pack("live")
    with pytest.raises(DuplicateRunError):
        await store.insert_run(make_run("other", status="queued", queue="q", dedup_id="d"))
    await store.close()


async def test_a_database_of_a_newer_format_is_refused(nx_uri: str) -> None:
    from pikku_mongo.errors import PikkuMongoError, StorageFormatError
    from pikku_mongo.wire.documents import FORMAT

    store = await mongo_store(nx_uri)
    await store.meta.update_one({"_id": "format"}, {"$set": {"version": FORMAT + 1}})
    with pytest.raises(StorageFormatError, match="upgrade this process") as raised:
        await store.init()
    assert isinstance(raised.value, PikkuMongoError)
    await store.close()


class Commands(monitoring.CommandListener):
    def __init__(self) -> None:
        self.names: list[str] = []
        self.on = False

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if self.on:
            self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


async def _start_commands(uri: str, **start: Any) -> list[str]:
    listener = Commands()
    store = MongoStore.from_uri(
        with_database(uri, f"dd_{uuid.uuid4().hex[:10]}"),
        event_listeners=[listener],
        change_streams=False,
    )
    await store.init()
    engine = Engine(store)

    @engine.workflow("one")
    async def one(ctx: WorkflowContext, data: Any) -> int:
        return 1

    listener.on = True
    await engine.start("one", **start)
    listener.on = False
    await store.close()
    return listener.names


async def test_a_start_with_a_dedup_id_costs_one_command_more(nx_uri: str) -> None:
    plain = await _start_commands(nx_uri, run_id="r1")
    deduped = await _start_commands(nx_uri, run_id="r1", dedup_id="once")
    print(plain, deduped)
    assert len(deduped) <= len(plain) + 1
