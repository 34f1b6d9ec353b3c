"""``MongoStore.debounce_run``: a debounced start in 2 commands, fleet-safe without a
unique secondary index.

1. Open the pair's window, or learn the open one's number (1 findAndModify of its
   ``debounce`` document: :meth:`~pikku_mongo.store.key_ops.KeyOps.open_window`). The
   window's run id follows from its number.
2. A start that opened the window inserts its run (1 insert, group-committed); one
   that found it open joins its run: 1 update by ``_id`` (group-committed), guarded by
   the run still pending (``queued`` with a ``not_before``), that sets the input and
   ``$max``-es ``not_before`` to ``now + debounce`` (within the window's bound).

A join whose guard fails finds (1 find) either no run (its opener has not inserted it
yet, or died before it did: the joiner inserts it, with its own input, so the window is
never left without a run; after :data:`ORPHAN_AFTER_S` it ends the window instead, as
the run of so old a window was deleted) or a run that is no longer pending (released
elsewhere before the window was ended, or cancelled): it ends the window and starts
again. A run is inserted for a window only once the window before has no pending run,
so at most one is pending at any moment.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from engine_core.common.clock import utcnow
from engine_core.records import RunRecord
from pikku_mongo.store.key_ops import NO_TIMEOUT_US, KeyOps, Window, window_id
from pikku_mongo.store.run_ops import RunOps
from pikku_mongo.wire.encoding import dump_value, from_us, pack, to_us
from pikku_mongo.wire.filters import eq

#: How long a window whose run does not exist belongs to its opener (seconds).
ORPHAN_AFTER_S = 60.0


@dataclass(eq=False, kw_only=True)
class DebounceOps:
    """The debounced starts of :class:`~pikku_mongo.MongoStore` (module docstring)."""

    keys: KeyOps
    run_ops: RunOps

    async def debounce_run(
        self, run: RunRecord, *, quiet: float, timeout: float | None
    ) -> tuple[str, bool]:
        """See :meth:`engine_core.store.Store.debounce_run`: 2 commands (module
        docstring); a few more when the window's run was cancelled or is not there."""
        assert run.debounce_key is not None, "a debounced start has a debounce_key"
        window = window_id(run.workflow, run.debounce_key)
        quiet_us = round(quiet * 1e6)
        timeout_us = NO_TIMEOUT_US if timeout is None else round(timeout * 1e6)
        while True:
            now_us = to_us(utcnow())
            found = await self.keys.open_window(window, now_us, timeout_us)
            bound = Window(found.number, found.born_us, min(found.timeout_us, timeout_us))
            run_id = bound.run_id(run)
            due_us = bound.due_us(now_us, quiet_us)
            if found.born_us is None and await self._insert(run, run_id, due_us):
                return run_id, True
            if await self._join(run, run_id, due_us):
                return run_id, False
            healed = await self._heal(run, bound, due_us, now_us)
            if healed == "inserted":
                return run_id, True
            if healed == "ended":
                await self.keys.close_window(window, found.number)

    async def _insert(self, run: RunRecord, run_id: str, due_us: int) -> bool:
        """Insert the window's run; False when a run has its id already."""
        made = replace(run, run_id=run_id, not_before=from_us(due_us))
        return await self.run_ops.insert_run(made) is None

    async def _join(self, run: RunRecord, run_id: str, due_us: int) -> bool:
        """Give the window's run this start's input and quiet period, if it is pending."""
        return await self.run_ops.run_writes.guarded(
            {"_id": pack(run_id), "status": eq("queued"), "not_before_us": {"$exists": True}},
            {
                "$set": {"input": dump_value(run.input), "updated_at": to_us(utcnow())},
                "$max": {"not_before_us": due_us},
            },
        )

    async def _heal(
        self, run: RunRecord, window: Window, due_us: int, now_us: int
    ) -> Literal["inserted", "again", "ended"]:
        """The join found no pending run: insert it when there is none and the window is
        young (its opener is slow, or died); "ended" when the window's run is no longer
        pending (or long gone), "again" when a pending run appeared meanwhile."""
        run_id = window.run_id(run)
        existing = await self.run_ops.get_run(run_id)
        if existing is not None:
            pending = existing.status == "queued" and existing.not_before is not None
            return "again" if pending else "ended"
        born_us = window.born_us if window.born_us is not None else now_us
        if now_us - born_us > ORPHAN_AFTER_S * 1e6:
            return "ended"  # a window this old whose run is gone: its run was deleted
        return "inserted" if await self._insert(run, run_id, due_us) else "again"
