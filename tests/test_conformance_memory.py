"""The store conformance suite on the in-memory reference store."""

from collections.abc import AsyncIterator

import pytest

from engine_core.memory import InMemoryStore
from engine_core.testing import StoreConformance


class TestInMemoryStore(StoreConformance):
    @pytest.fixture
    async def store(self) -> AsyncIterator[InMemoryStore]:
        store = InMemoryStore()
        await store.init()
        yield store
        await store.close()
