"""The in-memory store's values and updates; waiting readers are woken in process."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any

from engine_core.memory.cloning import clone
from engine_core.records import TERMINAL, RunRecord, UpdateRecord, UpdateSubmission, ValueRecord


class TalkMemory:
    """The value and update methods over dicts."""

    _runs: dict[str, RunRecord]
    _values: dict[tuple[str, str], ValueRecord]
    _updates: dict[tuple[str, str], UpdateRecord]
    _talk_waiters: dict[str, set[asyncio.Queue[Any]]]

    def _wake_talk(self, kind: str, item: Any) -> None:
        for waiter in self._talk_waiters[kind]:
            waiter.put_nowait(item)

    async def _talk_hints(self, kind: str) -> AsyncIterator[Any]:
        waiter: asyncio.Queue[Any] = asyncio.Queue()
        self._talk_waiters[kind].add(waiter)
        try:
            if kind != "updates":
                yield ""  # watching
            while True:
                yield await waiter.get()
        finally:
            self._talk_waiters[kind].discard(waiter)

    # ---- values -------------------------------------------------------------------

    async def put_value(
        self,
        run_id: str,
        key: str,
        value: Any,
        *,
        branch: str,
        position: int,
        written_at: datetime,
    ) -> bool:
        """:meth:`Store.put_value <engine_core.store.Store.put_value>`, in memory."""
        kept = self._values.get((run_id, key))
        if kept is not None and kept.marks.get(branch, -1) >= position:
            return False
        marks = dict(kept.marks) if kept is not None else {}
        marks[branch] = position
        self._values[(run_id, key)] = ValueRecord(run_id, key, clone(value), written_at, marks)
        self._wake_talk("values", run_id)
        return True

    async def get_value(self, run_id: str, key: str) -> ValueRecord | None:
        """:meth:`Store.get_value <engine_core.store.Store.get_value>`, in memory."""
        kept = self._values.get((run_id, key))
        return None if kept is None else _copy_value(kept)

    async def list_values(self, run_id: str) -> list[ValueRecord]:
        """:meth:`Store.list_values <engine_core.store.Store.list_values>`, in memory."""
        found = [v for (r, _), v in self._values.items() if r == run_id]
        return [_copy_value(v) for v in sorted(found, key=lambda v: v.key)]

    def value_hints(self) -> AsyncIterator[str] | None:
        """:meth:`Store.value_hints <engine_core.store.Store.value_hints>`, in memory."""
        return self._talk_hints("values")

    # ---- updates ------------------------------------------------------------------

    async def submit_update(self, update: UpdateRecord) -> UpdateSubmission:
        """:meth:`Store.submit_update <engine_core.store.Store.submit_update>`, in memory."""
        existing = self._updates.get((update.run_id, update.update_id))
        if existing is not None:
            return UpdateSubmission(kept=False, existing=clone(existing))
        run = self._runs.get(update.run_id)
        if run is None or run.status in TERMINAL:
            return UpdateSubmission(kept=False, run_status=None if run is None else run.status)
        self._updates[(update.run_id, update.update_id)] = clone(update)
        run.pending_pass = True
        self._wake_talk("updates", None)
        return UpdateSubmission(kept=True)

    async def consume_update(self, run_id: str, name: str, consumer: str) -> UpdateRecord | None:
        """:meth:`Store.consume_update <engine_core.store.Store.consume_update>`, in memory."""
        mine = [u for u in self._of(run_id) if u.consumed_by == consumer]
        if mine:
            return clone(mine[0])
        for update in self._of(run_id):
            if update.name == name and update.consumed_by is None:
                update.consumed_by = consumer
                return clone(update)
        return None

    async def answer_update(
        self, run_id: str, update_id: str, answer: dict[str, Any], *, answered_at: datetime
    ) -> UpdateRecord | None:
        """:meth:`Store.answer_update <engine_core.store.Store.answer_update>`, in memory."""
        update = self._updates.get((run_id, update_id))
        if update is None:
            return None
        if update.answer is None:
            update.answer, update.answered_at = clone(answer), answered_at
            self._wake_talk("answers", run_id)
        return clone(update)

    async def get_update(self, run_id: str, update_id: str) -> UpdateRecord | None:
        """:meth:`Store.get_update <engine_core.store.Store.get_update>`, in memory."""
        update = self._updates.get((run_id, update_id))
        return None if update is None else clone(update)

    async def list_updates(self, run_id: str, *, pending: bool) -> list[UpdateRecord]:
        """:meth:`Store.list_updates <engine_core.store.Store.list_updates>`, in memory."""
        return [clone(u) for u in self._of(run_id) if not pending or u.answer is None]

    def answer_hints(self) -> AsyncIterator[str] | None:
        """:meth:`Store.answer_hints <engine_core.store.Store.answer_hints>`, in memory."""
        return self._talk_hints("answers")

    def update_hints(self) -> AsyncIterator[None] | None:
        """:meth:`Store.update_hints <engine_core.store.Store.update_hints>`, in memory."""
        return self._talk_hints("updates")

    def _of(self, run_id: str) -> list[UpdateRecord]:
        """The run's updates, oldest first (the records themselves)."""
        found = [u for (r, _), u in self._updates.items() if r == run_id]
        return sorted(found, key=lambda u: u.seq)

    def _drop_talk(self, run_ids: Iterable[str]) -> None:
        gone = set(run_ids)
        self._values = {k: v for k, v in self._values.items() if k[0] not in gone}
        self._updates = {k: v for k, v in self._updates.items() if k[0] not in gone}


def _copy_value(kept: ValueRecord) -> ValueRecord:
    return replace(kept, value=clone(kept.value), marks=dict(kept.marks))
