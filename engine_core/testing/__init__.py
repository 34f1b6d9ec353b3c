"""Test helpers for store implementations: the store conformance suite.

Subclass :class:`StoreConformance` in a pytest module and give it a ``store`` fixture
that yields a fresh, initialised, empty store::

    class TestMyStore(StoreConformance):
        @pytest.fixture
        async def store(self):
            store = MyStore(...)
            await store.init()
            yield store
            await store.close()

Requires pytest and pytest-asyncio (the ``test`` extra).
"""

from engine_core.testing.conformance import StoreConformance

__all__ = ["StoreConformance"]
