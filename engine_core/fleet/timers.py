"""In-process timers: wake-ups this process armed for its runs and queue jobs.

A timer is only a shortcut: every wake-up is also durable in the store (a step's
``due_at``), and recovery fires what a dead process's timers would have.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from datetime import datetime

from engine_core.records import utcnow


class Timers:
    """Callbacks due at a time, at most one per key; all cancelled by :meth:`cancel_all`."""

    def __init__(self) -> None:
        self._handles: dict[Hashable, asyncio.TimerHandle] = {}

    def __len__(self) -> int:
        return len(self._handles)

    def at(self, key: Hashable, due_at: datetime, fire: Callable[[], None]) -> None:
        """Call ``fire()`` when ``due_at`` comes, unless a timer for ``key`` is armed."""
        if key in self._handles:
            return
        delay = max(0.0, (due_at - utcnow()).total_seconds())

        def run() -> None:
            self._handles.pop(key, None)
            fire()

        self._handles[key] = asyncio.get_running_loop().call_later(delay, run)

    def cancel_all(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()
