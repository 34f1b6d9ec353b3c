"""``MongoStore``'s deletion of finished runs (``engine.delete_finished_runs``,
``pikku-mongo prune``): a run goes with every document that belongs to it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from pymongo import DeleteMany
from pymongo.asynchronous.collection import AsyncCollection

from engine_core.records import TERMINAL
from pikku_mongo.store.dedup_ops import DedupOps
from pikku_mongo.wire.checks import check_datetime, check_int
from pikku_mongo.wire.documents import Doc
from pikku_mongo.wire.encoding import to_us
from pikku_mongo.wire.filters import eq
from pikku_mongo.wire.retry import transient_retry

#: Least recently updated first (see :mod:`pikku_mongo.store.run_ops`).
_LEAST_RECENT = [("updated_at", 1)]


@dataclass(eq=False, kw_only=True)
class PruneOps:
    """``MongoStore.delete_runs``. ``owned``: the collections of documents that belong
    to a run (its steps, events, stream entries, heartbeats), deleted with it, before
    it."""

    runs: AsyncCollection[Doc]
    owned: Sequence[AsyncCollection[Doc]]
    dedup: DedupOps

    @transient_retry
    async def delete_runs(self, *, finished_before: datetime, limit: int) -> int:
        """1 find per terminal status (the least recently updated first); when it finds
        runs, 1 bulk delete of their steps, 1 of their events, 1 of their stream entries, 1 of
        their heartbeats, 1 of their dedup claims, then 1 delete of the runs
        (so a crash in between leaves the run to be found again, never orphans)."""
        if check_int(limit, "limit") <= 0:
            return 0
        cutoff = {"$lt": to_us(check_datetime(finished_before, "finished_before"))}
        found: list[Doc] = []
        for status in sorted(TERMINAL):
            query = self.runs.find(
                {"status": eq(status), "updated_at": cutoff}, {"_id": 1, "updated_at": 1}
            )
            found += await query.sort(_LEAST_RECENT).limit(limit).to_list()
        found.sort(key=lambda d: d.get("updated_at", 0))
        ids = [doc["_id"] for doc in found[:limit]]
        if not ids:
            return 0
        by_run = [DeleteMany({"run_id": eq(run_id)}) for run_id in ids]
        for collection in self.owned:
            await collection.bulk_write(by_run, ordered=False)
        await self.dedup.purge(ids)
        result = await self.runs.delete_many(
            {"_id": {"$in": ids}, "status": {"$in": sorted(TERMINAL)}, "updated_at": cutoff}
        )
        return result.deleted_count
