"""The in-memory store's flow control per key: debounce windows, ``key_rate`` windows
and the keys waiting in a line."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from engine_core.memory.cloning import clone
from engine_core.records import KeyWindow, RunRecord, debounce_run_id
from engine_core.store import TimeSource


class FlowKeyMemory:
    """The per-key flow-control methods of
    :class:`~engine_core.memory.store.InMemoryStore`."""

    clock: TimeSource
    _runs: dict[str, RunRecord]
    _windows: dict[tuple[str, str], tuple[int, tuple[datetime, float | None] | None]]
    _key_windows: dict[tuple[str, str | None], KeyWindow]

    async def debounce_run(
        self, run: RunRecord, *, quiet: float, timeout: float | None
    ) -> tuple[str, bool]:
        """:meth:`Store.debounce_run <engine_core.store.Store.debounce_run>`, in memory."""
        assert run.debounce_key is not None, "a debounced start has a debounce_key"
        pair = (run.workflow, run.debounce_key)
        now = self.clock.now()
        number, opened = self._windows.get(pair, (0, None))
        if opened is not None:
            pending = self._runs.get(debounce_run_id(*pair, number))
            if pending is not None and pending.status == "queued" and pending.not_before:
                born, bound = opened
                bound = _smaller(bound, timeout)
                self._windows[pair] = (number, (born, bound))
                due = now + timedelta(seconds=quiet)
                if bound is not None:
                    due = min(due, born + timedelta(seconds=bound))
                pending.input = clone(run.input)
                pending.not_before = max(pending.not_before, due)
                pending.updated_at = now
                return pending.run_id, False
            number += 1  # its run was released, cancelled or ended: the window ended
        run_id = debounce_run_id(*pair, number)
        self._windows[pair] = (number, (now, timeout))
        made = replace(run, run_id=run_id, not_before=now + timedelta(seconds=quiet))
        self._runs[run_id] = clone(made)
        return run_id, True

    async def get_key_windows(
        self, queue: str, keys: Sequence[str | None]
    ) -> dict[str | None, KeyWindow]:
        """:meth:`Store.get_key_windows <engine_core.store.Store.get_key_windows>`, in
        memory."""
        found = {key: self._key_windows.get((queue, key)) for key in keys}
        return {key: clone(window) for key, window in found.items() if window is not None}

    async def save_key_windows(
        self, queue: str, windows: Mapping[str | None, list[tuple[datetime, int]]], *, version: int
    ) -> None:
        """:meth:`Store.save_key_windows <engine_core.store.Store.save_key_windows>`, in
        memory."""
        for key, window in windows.items():
            stored = self._key_windows.get((queue, key))
            if stored is None or stored.version < version:
                self._key_windows[(queue, key)] = KeyWindow(list(window), version)

    async def count_waiting_keys(self, queue: str) -> dict[str | None, int]:
        """:meth:`Store.count_waiting_keys <engine_core.store.Store.count_waiting_keys>`,
        in memory."""
        counts: dict[str | None, int] = {}
        for run in self._runs.values():
            if run.queue == queue and run.status == "queued" and run.not_before is None:
                counts[run.queue_key] = counts.get(run.queue_key, 0) + 1
        return counts


def _smaller(a: float | None, b: float | None) -> float | None:
    """The smaller bound of two (None: no bound)."""
    if a is None or b is None:
        return b if a is None else a
    return min(a, b)
