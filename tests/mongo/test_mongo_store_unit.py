"""Unit tests of ``pikku_mongo.MongoStore``, the Mongo-specific part.

The shared conformance suite (``engine_core.testing``) checks every store against the
protocol; this file checks what is particular to MongoDB (URIs, indexes, encodings,
operator injection, retries) and compares MongoStore with the
reference ``InMemoryStore`` on the cases the conformance suite does not cover.

The wire server is the session's (``tests/conftest.py``): ``MONGODB_URI`` when set,
else nx-27017. Each test gets a fresh database, dropped afterwards.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.errors import AutoReconnect, InvalidOperation, OperationFailure
from tenacity import wait_none

import pikku_mongo.wire.retry
from engine_core.common.clock import utcnow
from engine_core.errors import StoreUnavailableError
from engine_core.memory import InMemoryStore
from engine_core.records import (
    AttemptEntry,
    EventRecord,
    Lease,
    RunRecord,
    StepGuard,
    StepPage,
    StepRecord,
)
from engine_core.store import Store
from pikku_mongo import MissingDatabaseError, MongoStore
from pikku_mongo.wire.documents import inflight_field
from pikku_mongo.wire.encoding import pack, unpack
from pikku_mongo.wire.retry import is_transient, transient_retry

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
T0 = datetime(2020, 1, 1, tzinfo=UTC)  # in the past: steps due at T0 are due


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


# ---- servers and stores -------------------------------------------------------------


@pytest.fixture(scope="session")
def mongo_uri(nx_uri: str) -> str:
    return nx_uri


def uri_with_database(uri: str, name: str) -> str:
    """``uri`` with its path (the database) replaced by ``name``."""
    base, _, options = uri.partition("?")
    scheme, _, rest = base.partition("://")
    hosts = rest.split("/", 1)[0]
    return f"{scheme}://{hosts}/{name}" + (f"?{options}" if options else "")


def fresh_name() -> str:
    return f"pikku_unit_{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def client(mongo_uri: str) -> AsyncIterator[AsyncMongoClient[dict[str, Any]]]:
    mongo_client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_uri)
    try:
        yield mongo_client
    finally:
        await mongo_client.close()


@pytest.fixture
async def mongo(client: AsyncMongoClient[dict[str, Any]]) -> AsyncIterator[MongoStore]:
    name = fresh_name()
    store = MongoStore(client[name], max_clock_skew=0)  # one host
    await store.init()
    try:
        yield store
    finally:
        await store.close()
        await client.drop_database(name)


@pytest.fixture(params=["memory", "mongo"])
async def store(
    request: pytest.FixtureRequest, client: AsyncMongoClient[dict[str, Any]]
) -> AsyncIterator[Store]:
    if request.param == "memory":
        yield InMemoryStore()
        return
    name = fresh_name()
    mongo_store = MongoStore(client[name], max_clock_skew=0)
    await mongo_store.init()
    try:
        yield mongo_store
    finally:
        await client.drop_database(name)


def run_record(run_id: str, **fields: Any) -> RunRecord:
    base: dict[str, Any] = {
        "workflow": "wf",
        "status": "running",
        "input": {"n": 1},
        "created_at": T0,
        "updated_at": T0,
    }
    base.update(fields)
    return RunRecord(run_id=run_id, **base)


def step_record(run_id: str, key: str, **fields: Any) -> StepRecord:
    base: dict[str, Any] = {"kind": "inline", "status": "pending"}
    base.update(fields)
    return StepRecord(run_id=run_id, key=key, **base)


def job(run_id: str, key: str, due: datetime, function: str = "f", **fields: Any) -> StepRecord:
    base: dict[str, Any] = {
        "kind": "dispatch",
        "status": "scheduled",
        "function": function,
        "due_at": due,
        "scheduled_at": due,
    }
    base.update(fields)
    return step_record(run_id, key, **base)


# ---- MongoDB specifics --------------------------------------------------------------


def test_mongo_store_satisfies_the_protocol() -> None:
    assert issubclass(MongoStore, Store)


@pytest.mark.parametrize(
    "uri",
    [
        "mongodb://127.0.0.1:1",
        "mongodb://127.0.0.1:1/",
        "mongodb://127.0.0.1:1/?directConnection=true",
        "mongodb://user:secret@127.0.0.1:1/?authSource=admin",
        # No DNS lookup happens: the database is read from the path alone.
        "mongodb+srv://cluster0.invalid/?retryWrites=true",
    ],
)
def test_from_uri_without_a_database_fails_clearly(uri: str) -> None:
    with pytest.raises(MissingDatabaseError, match="names no database") as caught:
        MongoStore.from_uri(uri)
    assert isinstance(caught.value, ValueError)
    assert "secret" not in str(caught.value)


def test_constructor_rejects_what_is_not_an_async_database() -> None:
    with pytest.raises(TypeError, match="AsyncDatabase"):
        MongoStore(database="mydb")  # type: ignore[arg-type]


async def test_from_uri_owns_and_closes_its_client(
    mongo_uri: str, client: AsyncMongoClient[dict[str, Any]]
) -> None:
    name = fresh_name()
    store = MongoStore.from_uri(uri_with_database(mongo_uri, name), prefix="own_")
    try:
        assert store.database.name == name
        assert store.runs.name == "own_runs"
        await store.init()
        assert await store.insert_run(run_record("r1")) is None
        assert (await client[name]["own_runs"].find_one({"_id": "r1"})) is not None
    finally:
        await store.close()
        await client.drop_database(name)
    with pytest.raises(InvalidOperation):
        await store.get_run("r1")
    await store.close()  # closing twice is harmless


async def test_a_store_given_a_database_leaves_the_client_open(
    client: AsyncMongoClient[dict[str, Any]],
) -> None:
    name = fresh_name()
    store = MongoStore(database=client[name])
    await store.init()
    await store.close()
    assert await client[name].command("ping")
    await client.drop_database(name)


async def test_init_twice_is_fine_and_creates_the_indexes(mongo: MongoStore) -> None:
    await mongo.init()
    await mongo.init()

    async def keys(collection: Any) -> list[tuple[list[tuple[str, int]], bool]]:
        info = await collection.index_information()
        return [(list(spec["key"]), bool(spec.get("unique"))) for spec in info.values()]

    step_indexes = await keys(mongo.steps)
    assert ([("run_id", 1)], False) in step_indexes  # one step is found by its _id
    assert any(k[:2] == [("status", 1), ("due_at", 1)] for k, _ in step_indexes)
    assert any(k[:3] == [("status", 1), ("kind", 1), ("halted", 1)] for k, _ in step_indexes)
    assert any(k[0] == ("expires_at", 1) for k, _ in await keys(mongo.leases))
    assert any(k[0] == ("run_id", 1) for k, _ in await keys(mongo.events))


async def test_a_refused_ttl_index_only_warns_once(
    mongo: MongoStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    calls = 0

    async def refuse(_models: Any) -> list[str]:
        nonlocal calls
        calls += 1
        raise OperationFailure("TTL indexes are not supported", code=67)

    monkeypatch.setattr(mongo.leases, "create_indexes", refuse)
    await mongo.init()
    await mongo.init()
    assert calls == 1
    assert sum("TTL index" in r.getMessage() for r in caplog.records) == 1


async def test_datetimes_come_back_timezone_aware(mongo: MongoStore) -> None:
    await mongo.insert_run(run_record("r1", created_at=at(0.123), updated_at=at(1)))
    run = await mongo.get_run("r1")
    assert run is not None
    assert run.created_at.tzinfo is not None and run.created_at == at(0.123)
    assert run.created_at.utcoffset() == timedelta(0)


WEIRD: Any = {
    "$set": {"a.b": 1, "$inc": {"x": 1}},
    "$where": "sleep(1000)",
    "k.e.y": [1, {"$ne": None}, "$x"],
    "": {"$": "."},
    "uni": "\u00e9\U0001f600\x00",
}


async def test_values_with_operator_keys_round_trip(mongo: MongoStore) -> None:
    await mongo.insert_run(run_record("r1", input=WEIRD, wire={"$x": WEIRD}))
    run = await mongo.get_run("r1")
    assert run is not None and run.input == WEIRD and run.wire == {"$x": WEIRD}
    raw = await mongo.runs.find_one({"_id": "r1"})
    assert raw is not None and json.loads(raw["input"]) == WEIRD  # stored as JSON text

    assert await mongo.begin_pass("r1", holder="h", ttl=30) is not None
    assert await mongo.settle_run(
        "r1", token=1, expect=["running"], status="failed", output=WEIRD, error={"$bad": WEIRD}
    )
    run = await mongo.get_run("r1")
    assert run is not None and run.output == WEIRD and run.error == {"$bad": WEIRD}

    await mongo.insert_step(job("r1", "$key.with.dots", at(0), payload=WEIRD))
    assert await mongo.update_step(
        "r1",
        "$key.with.dots",
        guard=StepGuard(status_in=("scheduled",)),
        changes={"result": WEIRD, "error": {"$e": WEIRD}},
        entry=AttemptEntry(attempt=1, status="failed", at=at(1), error={"$e.x": WEIRD}),
    )
    step = await mongo.get_step("r1", "$key.with.dots")
    assert step is not None
    assert (step.payload, step.result, step.error) == (WEIRD, WEIRD, {"$e": WEIRD})
    assert step.history[-1].error == {"$e.x": WEIRD}

    await mongo.insert_event(EventRecord("e1", "r1", "$name.x", WEIRD, at(0)))
    event = await mongo.consume_event("r1", "$name.x", "c")
    assert event is not None and event.payload == WEIRD


async def test_inflight_field_names_never_use_the_step_key(mongo: MongoStore) -> None:
    await mongo.insert_run(run_record("r1"))
    await mongo.begin_pass("r1", holder="h", ttl=30)
    keys = ["$set", "a.b", "", "x#1", "\U0001f600"]
    for n, key in enumerate(keys):
        assert await mongo.start_step(
            "r1", token=1, status="running", key=key, attempt=n, started_at=at(n)
        )
    raw = await mongo.runs.find_one({"_id": "r1"})
    assert raw is not None
    assert sorted(raw["inflight"]) == sorted(inflight_field(k) for k in keys)
    assert all(name.startswith("k") and name[1:].isalnum() for name in raw["inflight"])
    run = await mongo.get_run("r1")
    assert run is not None and sorted(run.inflight) == sorted(keys)


OPERATORS: list[Any] = [{"$ne": 1}, {"$gt": ""}, ["a"], 7, None]


@pytest.mark.parametrize("bad", OPERATORS, ids=lambda v: repr(v))
async def test_operator_shaped_ids_are_rejected(mongo: MongoStore, bad: Any) -> None:
    await mongo.insert_run(run_record("r1"))
    lease = Lease("k", "h", 1, at(0))
    calls: list[Any] = [
        mongo.get_run(bad),
        mongo.begin_pass(bad, holder="h", ttl=1),
        mongo.begin_pass("r1", holder=bad, ttl=1),
        mongo.request_pass(bad),
        mongo.set_run_status(bad, "cancelled", expect=["running"]),
        mongo.list_child_runs(bad),
        mongo.load_steps(bad),
        mongo.get_step(bad, "k"),
        mongo.get_step("r1", bad),
        mongo.halt_steps(bad, True),
        mongo.consume_event("r1", bad, "c"),
        mongo.consume_event("r1", "n", bad),
        mongo.consume_event(bad, "n", "c"),
        mongo.acquire_lease(bad, "h", 1),
        mongo.acquire_lease("k", bad, 1),
        mongo.refresh_lease(replace(lease, key=bad), 1),
        mongo.release_lease(replace(lease, holder=bad)),
        mongo.start_step("r1", token=1, status="running", key=bad, attempt=1, started_at=at(0)),
        mongo.extend_claim("r1", "k", holder=bad, attempt=1, claim_ttl=1),
        mongo.update_step("r1", bad, guard=StepGuard(), changes={}),
        mongo.claim_steps([bad], holder="h", claim_ttl=1, limit=1),
        mongo.find_runs_needing_pass([bad], 1),
        mongo.insert_run(run_record(bad)),
        mongo.insert_step(step_record(bad, "k")),
        mongo.insert_event(EventRecord("e", bad, "n", None, at(0))),
    ]
    calls.append(mongo.find_scheduled_steps(1, StepPage(at(0), bad, "k")))
    if bad is not None:  # None means "not filtered" for these
        calls.append(mongo.update_step("r1", "k", guard=StepGuard(claim_holder=bad), changes={}))
        calls.append(mongo.list_runs(workflow=bad, status=None, limit=1, after=None))
        calls.append(mongo.list_runs(workflow=None, status=None, limit=1, after=bad))
    if not isinstance(bad, int):
        calls.append(mongo.settle_run("r1", token=bad, expect=["running"]))
        calls.append(mongo.extend_claim("r1", "k", holder="h", attempt=bad, claim_ttl=1))
    for call in calls:
        with pytest.raises(TypeError):
            await call
    run = await mongo.get_run("r1")
    assert run is not None and run.token == 0 and run.status == "running"


async def test_nul_and_escape_characters_in_ids(store: Store) -> None:
    """nx-27017 cannot match NUL by equality; ids are escaped, order-preservingly."""
    ids = ["a\x00", "a", "a\x01", "a\x00b", "a\x02", "a\x01\x01"]
    for run_id in ids:
        await store.insert_run(run_record(run_id, parent_run_id="p\x00"))
        await store.insert_event(EventRecord(f"e-{ids.index(run_id)}", run_id, "n", 1, at(0)))
        assert await store.consume_event(run_id, "n", f"{run_id}\x00step") is not None
        assert await store.consume_event(run_id, "n", f"{run_id}\x00step") is not None
    assert [
        r.run_id for r in await store.list_runs(workflow=None, status=None, limit=10, after=None)
    ] == sorted(ids)
    assert len(await store.list_child_runs("p\x00")) == len(ids)
    assert await store.list_child_runs("p") == []


def test_pack_is_reversible_and_order_preserving() -> None:
    samples = ["", "a", "\x00", "\x01", "\x02", "a\x00", "a\x00\x00", "a\x01", "\x01\x02", "b"]
    for s in samples:
        assert unpack(pack(s)) == s
        assert "\x00" not in pack(s)
    assert sorted(samples) == sorted(samples, key=pack)


# ---- retries ------------------------------------------------------------------------


def test_transient_errors() -> None:
    from pymongo.errors import (
        ConnectionFailure,
        DuplicateKeyError,
        NetworkTimeout,
        NotPrimaryError,
    )

    for exc in (AutoReconnect("x"), NotPrimaryError("x"), NetworkTimeout("x")):
        assert is_transient(exc)
    assert is_transient(ConnectionFailure("x"))
    assert not is_transient(DuplicateKeyError("x", 11000))
    assert not is_transient(OperationFailure("x", 2))
    assert not is_transient(ValueError("x"))


@pytest.fixture
def no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pikku_mongo.wire.retry, "_WAIT", wait_none())


async def test_transient_errors_are_retried_then_surface(
    no_wait: None, caplog: pytest.LogCaptureFixture
) -> None:
    calls = 0

    @transient_retry
    async def flaky(fail: int) -> str:
        nonlocal calls
        calls += 1
        if calls <= fail:
            raise AutoReconnect("primary stepped down")
        return "ok"

    with caplog.at_level(logging.DEBUG, logger="pikku_mongo.wire.retry"):
        assert await flaky(2) == "ok" and calls == 3
    assert sum("retrying" in r.getMessage() for r in caplog.records) == 2
    calls = 0
    # Given up: the engine's own error, which passes and workers wait out.
    with pytest.raises(StoreUnavailableError, match="primary stepped down") as raised:
        await flaky(100)
    assert isinstance(raised.value.__cause__, AutoReconnect)
    assert calls == pikku_mongo.wire.retry.MAX_ATTEMPTS

    @transient_retry
    async def broken() -> None:
        nonlocal calls
        calls += 1
        raise OperationFailure("bad query", 2)

    calls = 0
    with pytest.raises(OperationFailure):
        await broken()
    assert calls == 1


class _LoseFirstReply:
    """A collection whose first ``update_one`` lands but whose reply is lost."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.lost = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def update_one(self, *args: Any, **kwargs: Any) -> Any:
        result = await self._inner.update_one(*args, **kwargs)
        if self.lost == 0:
            self.lost += 1
            raise AutoReconnect("connection reset after the write")
        return result


async def test_a_retried_update_step_appends_its_entry_once(
    mongo: MongoStore, no_wait: None
) -> None:
    await mongo.insert_step(job("r1", "k", at(0)))
    lossy = _LoseFirstReply(mongo.step_writes.collection)
    mongo.step_writes.collection = lossy  # type: ignore[assignment]
    landed = await mongo.update_step(
        "r1",
        "k",
        guard=StepGuard(status_in=("scheduled", "running")),
        changes={"status": "running"},  # does not break the guard: a blind repeat would
        entry=AttemptEntry(attempt=1, status="running", at=utcnow() + timedelta(microseconds=7)),
    )
    assert landed and lossy.lost == 1
    step = await mongo.get_step("r1", "k")
    assert step is not None and len(step.history) == 1


# ---- the protocol, side by side with InMemoryStore -------------------------------------


async def test_update_step_rejects_unknown_fields(store: Store) -> None:
    with pytest.raises(ValueError, match="unknown step fields"):
        await store.update_step("r", "k", guard=StepGuard(), changes={"nope": 1})


async def test_update_step_can_replace_the_history_and_add_an_entry(store: Store) -> None:
    await store.insert_step(job("r", "b", at(0)))
    entries = [AttemptEntry(1, "failed", at(1), error={"m": 1}), AttemptEntry(2, "running", at(2))]
    assert await store.update_step(
        "r",
        "b",
        guard=StepGuard(),
        changes={"history": entries[:1]},
        entry=entries[1],
    )
    step = await store.get_step("r", "b")
    assert step is not None and step.history == entries
    assert not await store.update_step("r", "missing", guard=StepGuard(), changes={"result": 1})
    assert await store.get_step("r", "missing") is None


async def test_same_observable_results_as_the_memory_store(mongo: MongoStore) -> None:
    """One scripted history applied to both stores reads back identically."""
    memory = InMemoryStore()

    async def script(s: Store) -> list[Any]:
        out: list[Any] = []
        out.append(await s.insert_run(run_record("r", wire={"traceparent": "00-x"})))
        out.append(await s.insert_run(run_record("c", parent_run_id="r", parent_step="s")))
        out.append(replace(await s.begin_pass("r", holder="h", ttl=30), lease_expires_at=T0))
        out.append(await s.start_step("r", token=1, status="running", key="s",
                                      attempt=1, started_at=at(1)))  # fmt: skip
        out.append(await s.insert_step(job("r", "d", at(0), payload=[1, "2", None])))
        await s.save_steps([StepRecord(
            "r", "s", kind="child", status="scheduled", attempts=1, child_run_id="c",
            updated_at=at(2), history=[AttemptEntry(1, "scheduled", at(2), started_at=at(1))],
        )])  # fmt: skip
        await s.halt_steps("r", True)
        await s.insert_event(EventRecord("e1", "r", "go", {"a": 1}, at(3)))
        out.append(await s.consume_event("r", "go", "r\x00w"))
        out.append(await s.settle_run("r", token=1, expect=["running"], status="completed",
                                      output={"done": True}))  # fmt: skip
        out.append(await s.list_child_runs("r"))
        run = await s.get_run("r")
        assert run is not None
        out.append(replace(run, updated_at=T0))  # the store's clock
        out.append(await s.load_steps("r"))
        return out

    assert await script(mongo) == await script(memory)
