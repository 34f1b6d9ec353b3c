"""``doctor``'s sharding checks and ``pikku-mongo shard-plan`` (docs/guides/sharding.md). No sharded
server runs here: the shard-key judgement is tested on ``config.collections`` documents
as a mongos returns them, and the other paths against a real (unsharded) server."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest

from pikku_mongo import MongoStore
from pikku_mongo.doctor import diagnose
from pikku_mongo.doctor.shards import blocking_indexes, judge_shard_keys
from tests.conftest import mongo_store

# config.collections documents as MongoDB 7.0 returns them (trimmed to what is read).
_OK = [
    {"_id": "app.pikku_runs", "key": {"_id": "hashed"}, "unique": False},
    {"_id": "app.pikku_steps", "key": {"run_id": "hashed"}, "unique": False},
    {"_id": "app.pikku_events", "key": {"run_id": "hashed"}, "unique": False},
    {"_id": "app.pikku_dedup", "key": {"_id": "hashed"}, "unique": False},
]


def test_the_expected_keys_pass() -> None:
    check = judge_shard_keys("app", "pikku_", _OK)
    assert check.status == "ok" and "4 sharded" in check.detail
    assert check.data["shard_keys"]["pikku_steps"] == {"run_id": "hashed"}


def test_a_key_the_filters_do_not_carry_fails() -> None:
    wrong = [*_OK[:1], {"_id": "app.pikku_steps", "key": {"_id": "hashed"}}]
    check = judge_shard_keys("app", "pikku_", wrong)
    assert check.status == "fail"
    assert "pikku_steps" in check.detail and "'run_id'" in check.detail
    ranged = [{"_id": "app.pikku_runs", "key": {"workflow": 1, "_id": 1}}]
    assert judge_shard_keys("app", "pikku_", ranged).status == "fail"
    queues = [{"_id": "app.pikku_queues", "key": {"name": 1}}]
    assert judge_shard_keys("app", "pikku_", queues).status == "fail"


def test_other_databases_and_dropped_collections_are_ignored() -> None:
    others = [
        {"_id": "other.pikku_steps", "key": {"_id": "hashed"}},
        {"_id": "app.pikku_steps", "key": {"_id": 1}, "dropped": True},
    ]
    check = judge_shard_keys("app", "pikku_", others)
    assert check.status == "warn" and "none of the store's collections" in check.detail


def test_unique_indexes_that_block_sharding() -> None:
    indexes = [
        {"key": {"_id": 1}, "unique": True},
        {"key": {"dedup": 1}, "unique": True, "sparse": True},
        {"key": {"run_id": 1, "key": 1}, "unique": True},
        {"key": {"workflow": 1}},
    ]
    assert blocking_indexes("pikku_steps", "run_id", indexes) == ["pikku_steps(dedup) unique"]
    assert blocking_indexes("pikku_runs", "_id", indexes) == [
        "pikku_runs(dedup) unique",
        "pikku_runs(run_id, key) unique",
    ]


@pytest.fixture
async def initialised(nx_uri: str) -> AsyncIterator[MongoStore]:
    store = await mongo_store(nx_uri)
    yield store
    await store.close()


async def test_doctor_on_a_server_that_is_not_sharded(initialised: MongoStore) -> None:
    report = await diagnose(initialised)
    assert report.get("shard keys").status == "ok"
    assert "not sharded" in report.get("shard keys").detail
    assert report.get("storage format").status == "ok"
    assert report.get("unique indexes").status == "ok"
    assert "off the server" in report.get("clock").detail


async def test_doctor_fails_on_the_old_unique_index_and_format(initialised: MongoStore) -> None:
    await initialised.runs.create_index([("dedup", 1)], unique=True, sparse=True)
    await initialised.meta.update_one({"_id": "format"}, {"$set": {"version": 2}})
    report = await diagnose(initialised)
    assert report.get("unique indexes").status == "fail"
    assert "pikku_runs(dedup) unique" in report.get("unique indexes").detail
    assert report.get("storage format").status == "fail"
    await initialised.init()  # the migration fixes both
    report = await diagnose(initialised)
    assert report.get("unique indexes").status == "ok"
    assert report.get("storage format").status == "ok"


def test_shard_plan_prints_the_commands() -> None:
    def plan(*extra: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "pikku_mongo.cli", "shard-plan", *extra]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)

    done = plan("--uri", "mongodb://db.example:27017/shop")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert (
        'db.adminCommand({ shardCollection: "shop.pikku_steps", key: { run_id: "hashed" } })'
        in lines
    )
    assert (
        'db.adminCommand({ shardCollection: "shop.pikku_runs", key: { _id: "hashed" } })' in lines
    )
    assert any("pikku-mongo init" in line for line in lines)
    data = json.loads(plan("--uri", "mongodb://h/shop", "--json").stdout)
    assert {"shardCollection": "shop.pikku_events", "key": {"run_id": "hashed"}} in data["commands"]
    refused = plan("--uri", "mongodb://h/")
    assert refused.returncode == 1 and "names no database" in refused.stderr


async def test_through_a_router_the_offset_is_the_mongos_clock(initialised: MongoStore) -> None:
    from pikku_mongo.doctor.diagnosis import _clock

    check = await _clock(initialised, "sharded")
    assert "off the mongos clock" in check.detail


def test_every_polling_backoff_is_capped_at_one_second() -> None:
    """Change streams on a sharded cluster can lag ~10 s behind an idle shard: a wake-up
    must never wait on them longer than a poll."""
    from engine_core.fleet import waiters, worker
    from engine_core.flow import admission
    from engine_core.schedules import scheduler

    assert worker.IDLE_MAX_S <= 1.0
    assert waiters.POLL_MAX_S <= 1.0
    assert admission.POLL_S <= 1.0
    assert scheduler.REREAD_S <= 1.0
