"""``MongoStore``'s documents per key: fair turns and ``key_rate`` windows (the
``qkeys`` collection) and debounce windows (``debounce``). Each is addressed by its
``_id`` alone, so every write goes to one shard of a sharded cluster (both collections
are sharded on ``{_id: "hashed"}``), and the queue's own state stays small whatever the
number of keys (docs/guides/flow-control.md).

``qkeys``, per (queue, key)::

    {_id: "t" + held key, next}            the turn the key's next run takes at least
    {_id: "w" + held key, window, version}  its admissions within the key_rate window

``debounce``, per (workflow, debounce key)::

    {_id, gen, born_us, timeout_us}

``gen`` is the number of the pair's current window, whose run's id is
:func:`~engine_core.records.debounce_run_id` of it; ``born_us`` (its first start) and
``timeout_us`` (the smallest ``debounce_timeout`` its starts gave, in microseconds) are
there while the window is open. A start opens a window and learns its number in one
findAndModify that only ``$min`` and ``$max`` (nx-27017 drops ``$setOnInsert``): on a
closed window it sets ``born_us``, on an open one it changes nothing that names the run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pymongo import ReturnDocument, UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import BulkWriteError, DuplicateKeyError

from engine_core.records import KeyWindow, RunRecord, debounce_run_id
from pikku_mongo.wire.causal import CausalReads
from pikku_mongo.wire.checks import check_int, check_opt_str, check_str
from pikku_mongo.wire.documents import Doc
from pikku_mongo.wire.encoding import ID_SEPARATOR, from_us, pack, to_us
from pikku_mongo.wire.filters import eq
from pikku_mongo.wire.flow_fields import held_key
from pikku_mongo.wire.retry import transient_retry
from pikku_mongo.writes.queued import only_duplicates

#: ``timeout_us`` of a window none of whose starts gave a ``debounce_timeout``.
NO_TIMEOUT_US = 2**62


def window_id(workflow: str, key: str) -> str:
    """The ``_id`` of the debounce windows of (``workflow``, ``key``)."""
    return f"{pack(check_str(workflow, 'workflow'))}{ID_SEPARATOR}{pack(check_str(key, 'key'))}"


@dataclass(frozen=True)
class Window:
    """A debounce window as a start found it: its number, and when open its first
    start and the smallest timeout given (microseconds)."""

    number: int
    born_us: int | None
    timeout_us: int

    def run_id(self, run: RunRecord) -> str:
        """The id of this window's run."""
        assert run.debounce_key is not None
        return debounce_run_id(run.workflow, run.debounce_key, self.number)

    def due_us(self, now_us: int, quiet_us: int) -> int:
        """When the run begins if no start comes after one at ``now_us``."""
        if self.born_us is None:
            return now_us + quiet_us
        return min(now_us + quiet_us, self.born_us + self.timeout_us)


@dataclass(eq=False, kw_only=True)
class KeyOps:
    """The per-key documents of :class:`~pikku_mongo.MongoStore` (module docstring)."""

    qkeys: AsyncCollection[Doc]
    windows: AsyncCollection[Doc]
    queues: AsyncCollection[Doc]
    reads: CausalReads

    # ---- fair turns ---------------------------------------------------------------

    async def take_turn(self, queue: str, key: str | None) -> int:
        """The turn of the next run of ``key`` joining ``queue``'s fair line: 1 find of
        the queue's state (its ``turn``), then 1 findAndModify of the key's turn when
        the key is behind no one, else 1 upsert lifting it to the queue's turn. (Repeated
        after a lost reply, a turn is skipped: the key waits a little less, never
        longer.)"""
        state = await self.reads.read_one(
            self.queues, {"_id": pack(check_str(queue, "queue name"))}, {"turn": 1}
        )
        floor = int(state.get("turn", 0)) if state is not None else 0
        turn_id = "t" + held_key(queue, check_opt_str(key, "queue key"))
        while True:
            taken = await self._next_turn(turn_id, floor)
            if taken is not None:
                return taken
            if await self._lift_turn(turn_id, floor):
                return floor

    @transient_retry
    async def _next_turn(self, turn_id: str, floor: int) -> int | None:
        before = await self.qkeys.find_one_and_update(
            {"_id": turn_id, "next": {"$gte": floor}},
            {"$inc": {"next": 1}},
            return_document=ReturnDocument.BEFORE,
        )
        return int(before["next"]) if before is not None else None

    @transient_retry
    async def _lift_turn(self, turn_id: str, floor: int) -> bool:
        """Take turn ``floor`` for a key behind it (or new); False when the key moved
        past it meanwhile."""
        try:
            await self.qkeys.update_one(
                {"_id": turn_id, "next": {"$lt": floor}}, {"$set": {"next": floor + 1}}, upsert=True
            )
        except DuplicateKeyError:
            return False
        return True

    # ---- key_rate windows ---------------------------------------------------------

    @transient_retry
    async def get_key_windows(
        self, queue: str, keys: Sequence[str | None]
    ) -> dict[str | None, KeyWindow]:
        """1 find by ``_id`` (``$in``)."""
        check_str(queue, "queue name")
        wanted = {"w" + held_key(queue, check_opt_str(k, "queue key")): k for k in keys}
        if not wanted:
            return {}
        docs = await self.reads.read_all(self.qkeys, {"_id": {"$in": list(wanted)}})
        return {
            wanted[doc["_id"]]: KeyWindow(
                [(from_us(t), int(n)) for t, n in doc.get("window") or []],
                int(doc.get("version", 0)),
            )
            for doc in docs
        }

    @transient_retry
    async def save_key_windows(
        self, queue: str, windows: Mapping[str | None, list[tuple[datetime, int]]], *, version: int
    ) -> None:
        """1 unordered bulk of upserts by ``_id``, each guarded by the stored version
        being older (one that is not collides on ``_id`` and is left as it is)."""
        check_str(queue, "queue name")
        ops = [
            UpdateOne(
                {"_id": "w" + held_key(queue, check_opt_str(key, "queue key")),
                 "version": {"$lt": check_int(version, "version")}},
                {"$set": {"window": [[to_us(t), int(n)] for t, n in window],
                          "version": version}},
                upsert=True,
            )
            for key, window in windows.items()
        ]  # fmt: skip
        if not ops:
            return
        try:
            await self.qkeys.bulk_write(ops, ordered=False)
        except BulkWriteError as exc:
            if not only_duplicates(exc):
                raise

    # ---- debounce windows ---------------------------------------------------------

    @transient_retry
    async def open_window(self, window: str, now_us: int, timeout_us: int) -> Window:
        """The pair's current window, opened by this call if it was closed: 1
        findAndModify, upserting (a concurrent first insert of the pair is read again)."""
        while True:
            try:
                before = await self.windows.find_one_and_update(
                    {"_id": window},
                    {"$min": {"born_us": now_us, "timeout_us": timeout_us}, "$max": {"gen": 0}},
                    upsert=True,
                    return_document=ReturnDocument.BEFORE,
                )
            except DuplicateKeyError:
                continue
            return _window_of(before)

    @transient_retry
    async def read_window(self, window: str) -> Window:
        """1 find."""
        return _window_of(await self.reads.read_one(self.windows, {"_id": window}))

    @transient_retry
    async def close_window(self, window: str, number: int) -> None:
        """End window ``number`` (the next start opens the next): 1 update, guarded by
        the number, so a late close never ends a later window."""
        await self.windows.update_one(
            {"_id": window, "gen": eq(check_int(number, "window"))},
            {"$inc": {"gen": 1}, "$unset": {"born_us": "", "timeout_us": ""}},
        )

    async def end_window(self, run: RunRecord) -> None:
        """``run`` (debounced) was released: end its window if it is still the current
        one (1 find, 1 update). A start that finds the window open with its run
        released ends it itself; this spares it the commands."""
        if run.debounce_key is None:
            return
        window = window_id(run.workflow, run.debounce_key)
        current = await self.read_window(window)
        if current.born_us is not None and current.run_id(run) == run.run_id:
            await self.close_window(window, current.number)


def _window_of(doc: dict[str, Any] | None) -> Window:
    if doc is None:
        return Window(0, None, NO_TIMEOUT_US)
    born = doc.get("born_us")
    return Window(
        int(doc.get("gen", 0)),
        int(born) if born is not None else None,
        int(doc.get("timeout_us", NO_TIMEOUT_US)),
    )
