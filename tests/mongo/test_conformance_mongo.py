"""The store conformance suite on MongoStore, against both wire servers."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from engine_core.testing import StoreConformance
from pikku_mongo import MongoStore
from tests.conftest import mongo_store


class TestMongoStoreOnNx(StoreConformance):
    @pytest.fixture
    async def store(self, nx_uri: str) -> AsyncIterator[MongoStore]:
        made = await mongo_store(nx_uri)
        yield made
        await made.close()


class TestMongoStoreOnMongoeco(StoreConformance):
    @pytest.fixture
    async def store(self, mongoeco_uri: str) -> AsyncIterator[MongoStore]:
        made = await mongo_store(mongoeco_uri)
        yield made
        await made.close()
