"""The store protocol: the only seam between the engine and its storage.

Every method is a single atomic operation on the store; the engine builds its
guarantees on the guards stated here. "Atomic" means a concurrent caller sees either
the whole write or none of it, and that two callers racing on the same guard cannot
both win. Times are timezone-aware UTC datetimes. Values (inputs, results, payloads)
arrive already checked as JSON-shaped and come back equal to what was written.
"""

from __future__ import annotations

import typing

from engine_core.store.clock import TimeSource
from engine_core.store.events import EventStore
from engine_core.store.fleet import FleetStore
from engine_core.store.flow import FlowStore
from engine_core.store.flow_keys import FlowKeyStore
from engine_core.store.runs import RunStore
from engine_core.store.steps import StepStore
from engine_core.store.streams import StreamStore
from engine_core.store.talk import TalkStore

__all__ = [
    "EventStore",
    "FleetStore",
    "FlowKeyStore",
    "FlowStore",
    "RunStore",
    "StepStore",
    "Store",
    "StreamStore",
    "TalkStore",
    "TimeSource",
]


@typing.runtime_checkable
class Store(
    RunStore,
    FlowStore,
    FlowKeyStore,
    StepStore,
    EventStore,
    StreamStore,
    TalkStore,
    FleetStore,
    typing.Protocol,
):
    """What the engine needs from storage, one protocol per part of it (``runs``,
    ``flow``, ``flow_keys``, ``steps``, ``events``, ``streams``, ``talk``, ``fleet``). See
    ``engine_core.testing`` for the suite that checks an implementation against every
    guarantee stated."""

    async def init(self) -> None:
        """Prepare the store (create indexes); safe to call any number of times."""

    async def close(self) -> None:
        """Release what the store holds open. The store is not used afterwards."""

    def follow_clock(self, clock: TimeSource) -> None:
        """Read the time from ``clock`` from now on (``Engine(store, clock=...)`` hands
        it down), for every lease, claim, due time and timestamp the store judges or
        writes itself. A store whose time is not the engine's to move (hosts of a fleet
        judge each other's leases against their own real clocks) raises ``ValueError``
        for a virtual clock, saying why."""
