"""What a run owns outside its own document: its steps, events, stream entries,
heartbeats and offloaded values, each with the run's packed id in ``run_id``. They are
deleted with the run, and they carry the TTL field ``expire_at`` while the run's
retention runs (see :mod:`pikku_mongo.store.prune_ops`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from pymongo import ASCENDING, DeleteMany, IndexModel, UpdateMany
from pymongo.asynchronous.collection import AsyncCollection

from pikku_mongo.store.offload_ops import OffloadOps
from pikku_mongo.wire.documents import Doc
from pikku_mongo.wire.filters import eq

#: Every owned collection: a run's documents by ``run_id``, and the TTL index MongoDB's
#: monitor deletes them by (``expire_at``: set only while the run's retention runs).
OWNED_INDEXES = [
    IndexModel([("run_id", ASCENDING)]),
    IndexModel([("expire_at", ASCENDING)], expireAfterSeconds=0),
]


@dataclass(eq=False)
class Owned:
    """The collections of the documents runs own (``collections``), and the values they
    keep in GridFS (``values``: its files are deleted by their own ids, see
    :meth:`OffloadOps.delete_of_runs`)."""

    collections: Sequence[AsyncCollection[Doc]]
    values: OffloadOps | None = None

    async def create_indexes(self) -> None:
        """1 ``createIndexes`` per collection (:data:`OWNED_INDEXES`)."""
        for collection in self.collections:
            await collection.create_indexes(OWNED_INDEXES)

    async def delete(self, run_ids: Sequence[str]) -> None:
        """Delete every document of these runs (packed ids): 1 bulk write per collection,
        and their values in GridFS."""
        if not run_ids:
            return
        by_run = [DeleteMany({"run_id": eq(run_id)}) for run_id in run_ids]
        for collection in self.collections:
            await collection.bulk_write(by_run, ordered=False)
        if self.values is not None:
            await self.values.delete_of_runs(run_ids)

    async def stamp(self, expiries: Mapping[str, datetime | None]) -> None:
        """Set the TTL field ``expire_at`` of every document of these runs (packed ids) to
        the time given, or remove it (None): 1 bulk write per collection."""
        if not expiries:
            return
        changes = [
            UpdateMany(
                {"run_id": eq(run_id)},
                {"$set": {"expire_at": at}} if at is not None else {"$unset": {"expire_at": ""}},
            )
            for run_id, at in expiries.items()
        ]
        for collection in self.collections:
            await collection.bulk_write(changes, ordered=False)
