"""In-process timers: wake-ups this process armed for its runs and queue jobs.

A timer is only a shortcut: every wake-up is also durable in the store (a step's
``due_at``), and recovery fires what a dead process's timers would have.

A timer armed for a run belongs to it: :meth:`Timers.cancel_run` cancels them all when
the run ends, so a long-lived process holds timers for its live runs only, not one per
run it ever handled until that run's deadline or timeout would have come.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable
from datetime import datetime

from engine_core.common.clock import Clock, Timer


class Timers:
    """Callbacks due at a time on ``clock``, at most one per key; all cancelled by
    :meth:`cancel_all`, a run's by :meth:`cancel_run`."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._handles: dict[Hashable, Timer] = {}
        # The keys of the timers armed for each run.
        self._of_run: dict[str, set[Hashable]] = {}

    def __len__(self) -> int:
        return len(self._handles)

    def at(
        self,
        key: Hashable,
        due_at: datetime,
        fire: Callable[[], None],
        *,
        run_id: str | None = None,
    ) -> None:
        """Call ``fire()`` when ``due_at`` comes, unless a timer for ``key`` is armed;
        with ``run_id``, the timer is the run's (cancelled when it ends)."""
        if key in self._handles:
            return

        def run() -> None:
            self._handles.pop(key, None)
            self._unlink(key, run_id)
            fire()

        self._handles[key] = self._clock.call_at(due_at, run)
        if run_id is not None:
            self._of_run.setdefault(run_id, set()).add(key)

    def _unlink(self, key: Hashable, run_id: str | None) -> None:
        if run_id is None:
            return
        keys = self._of_run.get(run_id)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._of_run[run_id]

    def run_ids(self) -> list[str]:
        """The runs that have timers armed here."""
        return list(self._of_run)

    def cancel_run(self, run_id: str) -> None:
        """Cancel every timer armed for the run (it ended: none is needed any more)."""
        for key in self._of_run.pop(run_id, ()):
            handle = self._handles.pop(key, None)
            if handle is not None:
                handle.cancel()

    def keep_only(self, run_id: str, keys: Collection[Hashable]) -> None:
        """Cancel the run's timers other than ``keys``."""
        for key in self._of_run.get(run_id, set()) - set(keys):
            handle = self._handles.pop(key, None)
            if handle is not None:
                handle.cancel()
            self._unlink(key, run_id)

    def cancel_all(self) -> None:
        """Cancel every timer."""
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()
        self._of_run.clear()
