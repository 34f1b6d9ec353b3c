"""What a store reads of its engine's clock (``Store.follow_clock``)."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol


class TimeSource(Protocol):
    """The engine's clock as a store sees it (``engine_core.common.clock.Clock``)."""

    #: Whether it is a virtual clock (moved only when told, by a test).
    virtual: bool

    def now(self) -> datetime:
        """The engine's time now, timezone-aware (UTC)."""
