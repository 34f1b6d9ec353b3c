"""The store conformance suite on MongoStore, against both wire servers.

Every command of the run goes through a :class:`~tests.support.shard_key_check.ShardKeyListener`:
a single-document write or upsert on a sharded collection whose filter does not carry
the collection's shard key fails the test that sent it (docs/guides/sharding.md: no sharded server
runs here, so this is what keeps the store servable by one). The suite runs again with
targeted polling forced on (the job index a sharded cluster gets by default: see
:mod:`pikku_mongo.store.job_index`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from engine_core.testing import StoreConformance
from engine_core.testing.retention_cases import RetentionCases
from pikku_mongo import MongoStore
from tests.conftest import mongo_store
from tests.support.shard_key_check import ShardKeyListener


async def _checked(uri: str, **options: Any) -> AsyncIterator[MongoStore]:
    listener = ShardKeyListener()
    made = await mongo_store(uri, event_listeners=[listener], **options)
    yield made
    await made.close()
    assert listener.checked > 0
    assert listener.violations == [], "\n".join(listener.violations)


class TestMongoStoreOnNx(StoreConformance):
    @pytest.fixture
    async def store(self, nx_uri: str) -> AsyncIterator[MongoStore]:
        async for made in _checked(nx_uri):
            yield made


class TestMongoStoreOnMongoeco(StoreConformance):
    @pytest.fixture
    async def store(self, mongoeco_uri: str) -> AsyncIterator[MongoStore]:
        async for made in _checked(mongoeco_uri):
            yield made


class TestTargetedPollingOnNx(StoreConformance):
    @pytest.fixture
    async def store(self, nx_uri: str) -> AsyncIterator[MongoStore]:
        async for made in _checked(nx_uri, targeted_polling=True):
            assert made.job_index is not None
            yield made


class TestTargetedPollingOnMongoeco(StoreConformance):
    @pytest.fixture
    async def store(self, mongoeco_uri: str) -> AsyncIterator[MongoStore]:
        async for made in _checked(mongoeco_uri, targeted_polling=True):
            assert made.job_index is not None
            yield made


class TestTtlStampingOnNx(RetentionCases):
    """Retention as on a server with a TTL monitor: the recovery pass stamps what ended
    runs own with ``expire_at`` (both wire servers hide a document past its TTL field
    from every query, as MongoDB's monitor deletes it within a minute)."""

    @pytest.fixture
    async def store(self, nx_uri: str) -> AsyncIterator[MongoStore]:
        async for made in _checked(nx_uri):
            made.prune_ops.ttl_monitor = True
            yield made


class TestTtlStampingOnMongoeco(TestTtlStampingOnNx):
    @pytest.fixture
    async def store(self, mongoeco_uri: str) -> AsyncIterator[MongoStore]:
        async for made in _checked(mongoeco_uri):
            made.prune_ops.ttl_monitor = True
            yield made
