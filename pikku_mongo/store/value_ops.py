"""``MongoStore``'s values (docs/guides/values-and-updates.md): the ``values`` collection.

One document per run and key: ``_id`` = packed run id, ``\\x01\\x03``, packed key;
``run_id`` (the shard key, in every filter), ``key``, the value as JSON text, the write
time in microseconds, and ``marks``: per branch of the body (``m`` for the body itself,
``m1_0`` for branch ``1.0``), the position of its last write of the key. A write is an
upsert guarded by its branch's mark, so a write made before (a replay's, or one sent
again) changes nothing and collides on ``_id`` instead. Writes go through the group
commit and ride the pass's next run write (:mod:`pikku_mongo.writes.riding`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pymongo import ASCENDING
from pymongo.asynchronous.collection import AsyncCollection

from engine_core.records import ValueRecord
from pikku_mongo.wire.causal import CausalReads
from pikku_mongo.wire.checks import check_datetime, check_int, check_str
from pikku_mongo.wire.documents import Doc
from pikku_mongo.wire.encoding import dump_value, from_us, load_value, pack, to_us, unpack
from pikku_mongo.wire.filters import any_of, eq
from pikku_mongo.wire.retry import surface_oversize, transient_retry
from pikku_mongo.wire.shard_keys import item_filter
from pikku_mongo.wire.watch import runs_changed
from pikku_mongo.writes.batcher import Batcher

_BY_KEY = [("key", ASCENDING)]


def _mark(branch: str) -> str:
    """The field of a branch's mark: branch paths are digits and dots."""
    return "m" + check_str(branch, "branch").replace(".", "_")


def _branch(mark: str) -> str:
    return mark[1:].replace("_", ".")


def value_from_doc(doc: Doc) -> ValueRecord:
    """The value a document holds."""
    marks = doc.get("marks") or {}
    return ValueRecord(
        run_id=unpack(doc["run_id"]),
        key=unpack(doc["key"]),
        value=load_value(doc.get("value")),
        written_at=from_us(doc["at"]),
        marks={_branch(m): int(n) for m, n in marks.items()},
    )


@dataclass(eq=False, kw_only=True)
class ValueOps:
    """The value methods of :class:`~pikku_mongo.MongoStore`."""

    values: AsyncCollection[Doc]
    value_writes: Batcher
    reads: CausalReads
    watch: bool

    @surface_oversize
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
        """1 upsert, group-committed (riding the pass's next run write where the server
        can). A collision (the mark is there already, or a racing first write made the
        document) is looked at once: 1 find, and 1 more upsert when the mark is still
        below ``position``."""
        field = "marks." + _mark(branch)
        check_int(position, "position")
        below = any_of({field: {"$lt": position}}, {field: {"$exists": False}})
        query = {**item_filter(run_id, key, "value key"), **below}
        change = {
            "$set": {
                "key": pack(key),
                "value": dump_value(value),
                "at": to_us(check_datetime(written_at, "written_at")),
                field: position,
            }
        }
        if await self.value_writes.upsert(query, change):
            return True
        return await self._collided(query, change, field, position)

    @transient_retry
    async def _collided(self, query: Doc, change: Doc, field: str, position: int) -> bool:
        """After a collision: another write of the first document may have won the race
        to make it (no mark of this branch yet), then this one goes again."""
        found = await self.reads.read_one(
            self.values, {"_id": query["_id"], "run_id": query["run_id"]}, {"marks": 1}
        )
        mark = None if found is None else (found.get("marks") or {}).get(field[6:])
        if mark is not None and int(mark) >= position:
            return False
        return await self.value_writes.upsert(query, change)

    @transient_retry
    async def get_value(self, run_id: str, key: str) -> ValueRecord | None:
        """1 find by ``_id``."""
        doc = await self.reads.read_one(self.values, item_filter(run_id, key, "value key"))
        return None if doc is None else value_from_doc(doc)

    @transient_retry
    async def list_values(self, run_id: str) -> list[ValueRecord]:
        """1 find on ``run_id`` (the index)."""
        query = {"run_id": eq(pack(check_str(run_id, "run id")))}
        docs = await self.values.find(query).sort(_BY_KEY).to_list()
        return [value_from_doc(doc) for doc in docs]

    def value_hints(self) -> AsyncIterator[str] | None:
        """A change stream of the ``values`` collection's writes (ends at once on a server
        without change streams)."""
        if not self.watch:
            return None
        return runs_changed(self.values, ["insert", "update", "replace"], "value change stream")
