"""The store protocol's flow control per key: debounce windows, the admissions of each
key within a queue's ``key_rate`` window, and the keys waiting in a fair line
(docs/guides/flow-control.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol

from engine_core.records import KeyWindow, RunRecord


class FlowKeyStore(Protocol):
    """Flow control per key (part of :class:`~engine_core.store.Store`). A run with
    ``fair`` set is put in its queue's line by turn wherever a store puts a run in a
    line (:meth:`~engine_core.store.RunStore.insert_run`,
    :meth:`~engine_core.store.FlowStore.release_delayed_runs`,
    :meth:`~engine_core.store.FlowStore.reenter_run`): its ``queue_turn`` becomes one
    more than the last turn its (queue, key) took, and at least the ``turn`` of the
    queue's state; the line orders runs by ``priority``, then turn (runs without one
    first), then ``created_at`` and run id."""

    async def debounce_run(
        self, run: RunRecord, *, quiet: float, timeout: float | None
    ) -> tuple[str, bool]:
        """Start ``run`` (``queued``, with a ``debounce_key``; its ``run_id`` is not used)
        as the pending run of its (``workflow``, ``debounce_key``), or join that pair's
        pending run. Returns the pending run's id and whether this call inserted it.

        A pair's runs come in windows 0, 1, ..., the run of window ``n`` having the id
        :func:`~engine_core.records.debounce_run_id` gives. A run is *pending* while it
        is ``queued`` with a ``not_before``. When the pair's current window has a
        pending run, this call replaces that run's ``input`` with ``run.input`` and moves
        its ``not_before`` to ``now + quiet`` if that is later, but never past the
        window's first start plus the smallest ``timeout`` any start of the window gave
        (None: no bound). Otherwise the window ended (its run was released, cancelled, or
        ended), and this call opens the next window: it inserts ``run`` under that
        window's id with ``not_before = now + quiet``. Of any number of concurrent calls
        for one pair, at most one pending run exists at any moment; each call's input is
        the input of the run whose id it returns until a later call (in the order the
        store records them) replaces it, or that run is released."""

    async def get_key_windows(
        self, queue: str, keys: Sequence[str | None]
    ) -> dict[str | None, KeyWindow]:
        """The ``key_rate`` windows of these keys of ``queue`` (None: no key); a key
        with no window stored is absent."""

    async def save_key_windows(
        self, queue: str, windows: Mapping[str | None, list[tuple[datetime, int]]], *, version: int
    ) -> None:
        """Store each key's window (a :class:`~engine_core.records.KeyWindow` with
        ``version``), unless the key's stored window has that version or a later one
        (a late save never takes back what a later one stored)."""

    async def count_waiting_keys(self, queue: str) -> dict[str | None, int]:
        """How many runs of each key (None: no key) wait in the queue's line (``queued``,
        not delayed); a key with none is absent."""
