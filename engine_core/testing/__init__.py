"""Test helpers: :class:`VirtualClock` for tests of workflows (docs/guides/testing.md),
and the store conformance suite for store implementations.

Subclass :class:`StoreConformance` in a pytest module and give it a ``store`` fixture
that yields a fresh, initialised, empty store::

    class TestMyStore(StoreConformance):
        @pytest.fixture
        async def store(self):
            store = MyStore(...)
            await store.init()
            yield store
            await store.close()

The suite runs under pytest and pytest-asyncio (the ``test`` extra); importing this
package imports neither, so ``VirtualClock`` serves any test runner.
"""

from engine_core.testing.conformance import StoreConformance
from engine_core.testing.virtual_clock import VirtualClock

__all__ = ["StoreConformance", "VirtualClock"]
