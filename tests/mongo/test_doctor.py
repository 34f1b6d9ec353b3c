"""``pikku_mongo.doctor.diagnosis``: each check's verdicts, on the wire servers and on ``hello``
replies of deployments there are none of here (replica sets, arbiters, mongos)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import WriteConcern
from pymongo.read_concern import ReadConcern

from pikku_mongo import MongoStore
from pikku_mongo.doctor import diagnose, render
from pikku_mongo.doctor.diagnosis import _topology
from pikku_mongo.wire.server import topology
from tests.conftest import mongo_store


@pytest.mark.parametrize(
    ("reply", "kind", "status", "words"),
    [
        ({"isWritablePrimary": True}, "standalone", "warn", "standalone"),
        ({"msg": "isdbgrid"}, "sharded", "ok", "mongos"),
        ({"setName": "rs0", "hosts": ["a:1", "b:1", "c:1"], "primary": "a:1"},
         "replica set", "ok", "3 data-bearing"),
        ({"setName": "rs0", "hosts": ["a:1", "b:1"], "arbiters": ["c:1"], "primary": "a:1"},
         "replica set", "warn", "arbiter"),
        ({"setName": "rs0", "hosts": ["a:1", "b:1"]}, "replica set", "warn", "fewer than three"),
        ({"setName": "rs0", "arbiterOnly": True}, "arbiter", "fail", "holds no data"),
        ({"isreplicaset": True}, "uninitialised", "fail", "rs.initiate"),
    ],
)  # fmt: skip
async def test_topologies(reply: dict[str, Any], kind: str, status: str, words: str) -> None:
    assert topology(reply) == kind
    check = await _topology(reply)
    assert (check.status, check.data["topology"]) == (status, kind)
    assert words in check.detail


@pytest.fixture
async def initialised(nx_uri: str) -> AsyncIterator[MongoStore]:
    store = await mongo_store(nx_uri)
    yield store
    await store.close()


async def test_a_healthy_store_on_nx(initialised: MongoStore) -> None:
    report = await diagnose(initialised)
    assert report.ok and report.warnings == 1  # the standalone server
    assert [c.name for c in report.checks] == [
        "server", "topology", "write concern", "read concern", "change streams",
        "indexes", "TTL index", "retention", "clock", "storage format", "unique indexes",
        "shard keys", "workers", "stranded runs",
    ]  # fmt: skip
    names = await initialised.database.list_collection_names()
    assert not [n for n in names if "doctor" in n]  # the scratch collection is dropped
    text = render(report)
    assert text.splitlines()[0].split() == ["check", "status", "detail"]
    assert text.endswith("ok: 0 failure(s), 1 warning(s)")


async def test_weaker_concerns_are_warnings_and_w0_fails(nx_uri: str) -> None:
    fast = await mongo_store(nx_uri, write_concern=WriteConcern(w=1))
    try:
        report = await diagnose(fast)
        assert report.get("write concern").status == "warn"
        assert "roll back" in report.get("write concern").detail
        assert report.get("read concern").status == "ok"  # local reads with w=1 writes
    finally:
        await fast.close()
    mixed = await mongo_store(
        nx_uri, write_concern=WriteConcern(w=1), read_concern=ReadConcern("majority")
    )
    try:
        report = await diagnose(mixed)
        assert report.get("read concern").status == "warn"
        assert "own writes" in report.get("read concern").detail
    finally:
        await mixed.close()
    blind = await mongo_store(nx_uri, write_concern=WriteConcern(w=0))
    try:
        report = await diagnose(blind)
        assert report.get("write concern").status == "fail" and not report.ok
    finally:
        await blind.close()
    nowait = await mongo_store(nx_uri, write_concern=WriteConcern(w="majority"))
    try:
        report = await diagnose(nowait)
        assert report.get("write concern").status == "warn"
        assert "wtimeout" in report.get("write concern").detail
    finally:
        await nowait.close()


async def test_missing_indexes_one_by_one(initialised: MongoStore) -> None:
    await initialised.runs.drop_index("workflow_1")
    report = await diagnose(initialised)
    assert report.get("indexes").status == "warn" and report.ok
    assert report.get("indexes").data["missing"] == ["pikku_runs(workflow)"]
    await initialised.leases.drop()
    report = await diagnose(initialised)
    assert report.get("TTL index").status == "warn"


async def test_a_far_clock_fails_and_a_near_one_warns(
    nx_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await mongo_store(nx_uri, max_clock_skew="1s")
    try:
        for shift, status in ((0.0, "ok"), (0.7, "warn"), (-1.5, "fail")):
            monkeypatch.setattr(
                "pikku_mongo.wire.server.wall_clock", lambda s=shift: time.time() + s
            )
            report = await diagnose(store)
            assert report.get("clock").status == status, report.get("clock")
        assert not report.ok
    finally:
        await store.close()


async def test_a_check_that_cannot_run_is_a_failure_not_a_crash(
    initialised: MongoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("no clock today")

    monkeypatch.setattr(initialised, "clock_offset", broken)
    report = await diagnose(initialised)
    assert report.get("clock").status == "fail"
    assert "no clock today" in report.get("clock").detail
    assert len(report.checks) == 14
