"""``MongoStore``'s deletion of ended runs: ``engine.delete_finished_runs`` and
``pikku-mongo prune``, and retention (``Store.expire_runs``). A run goes with every
document that belongs to it.

Retention on MongoDB. A write that ends a run with an ``expire_at`` sets ``expire_us``
and ``unstamped`` on it (:func:`~pikku_mongo.wire.documents.expiry_fields`). Where the
server runs a TTL monitor (MongoDB; ``pikku-mongo doctor`` says), the recovery pass
stamps what the run owns with the TTL field ``expire_at`` (:meth:`PruneOps.expire_runs`),
and only then the run itself, so that the monitor never deletes a run before what it
owns carries the field: MongoDB then deletes them all. Where it runs none (nx-27017,
mongoeco), the recovery pass deletes the runs past ``expire_us`` itself, a bounded
batch at a time, as a prune does. A run made live again (``engine.retry``) loses the
fields, and what it owns its stamps.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pymongo import UpdateOne
from pymongo.asynchronous.collection import AsyncCollection

from engine_core.records import TERMINAL
from pikku_mongo.store.dedup_ops import DedupOps
from pikku_mongo.store.owned import Owned
from pikku_mongo.wire.checks import check_datetime, check_int
from pikku_mongo.wire.documents import Doc
from pikku_mongo.wire.encoding import MIN_TIME, from_us, to_us
from pikku_mongo.wire.filters import eq
from pikku_mongo.wire.retry import transient_retry

#: Least recently updated first (see :mod:`pikku_mongo.store.run_ops`).
_LEAST_RECENT = [("updated_at", 1)]
_ENDED = {"$in": sorted(TERMINAL)}


@dataclass(eq=False, kw_only=True)
class PruneOps:
    """``MongoStore.delete_runs`` and ``expire_runs``. ``owned``: the documents that
    belong to a run (deleted with it, before it)."""

    runs: AsyncCollection[Doc]
    owned: Owned
    dedup: DedupOps
    #: Whether the server deletes TTL-expired documents itself (found out at ``init``).
    ttl_monitor: bool = False

    @transient_retry
    async def delete_runs(self, *, finished_before: datetime, limit: int) -> int:
        """1 find per terminal status (the least recently updated first); when it finds
        runs, 1 bulk delete per owned collection (steps, events, stream entries,
        heartbeats, offloaded values), 1 of their dedup claims, then 1 delete of the
        runs (so a crash in between leaves the run to be found again, never orphans)."""
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
        return await self._delete([doc["_id"] for doc in found[:limit]], {"updated_at": cutoff})

    async def _delete(self, ids: list[str], guard: Doc) -> int:
        if not ids:
            return 0
        await self.owned.delete(ids)
        await self.dedup.purge(ids)
        result = await self.runs.delete_many({"_id": {"$in": ids}, "status": _ENDED, **guard})
        return result.deleted_count

    @transient_retry
    async def expire_runs(self, before: datetime, limit: int) -> int:
        """Where the server runs a TTL monitor: stamp up to ``limit`` ended runs for it
        (1 find, 1 bulk update per owned collection, 1 bulk update of the runs, and 1
        find when a run went live again meanwhile). Elsewhere: 1 find over the
        ``expire_us`` index and, when it finds runs, their deletion as ``delete_runs``."""
        if check_int(limit, "limit") <= 0:
            return 0
        if self.ttl_monitor:
            return await self._stamp(limit)
        due = {"$lt": to_us(check_datetime(before, "before"))}
        cursor = self.runs.find({"expire_us": due}, {"_id": 1}).sort([("expire_us", 1)])
        found = await cursor.limit(limit).to_list()
        return await self._delete([doc["_id"] for doc in found], {"expire_us": due})

    async def _stamp(self, limit: int) -> int:
        """Stamp what ended runs own, then the runs (their ``unstamped`` cleared); a run
        made live meanwhile keeps nothing stamped."""
        cursor = self.runs.find({"unstamped": {"$gte": MIN_TIME}}, {"_id": 1, "unstamped": 1})
        cursor = cursor.sort([("unstamped", 1)]).limit(limit)
        found = {doc["_id"]: int(doc["unstamped"]) for doc in await cursor.to_list()}
        if not found:
            return 0
        await self.owned.stamp({run_id: from_us(due) for run_id, due in found.items()})
        done = await self.runs.bulk_write(
            [
                UpdateOne(
                    {"_id": run_id, "unstamped": eq(due), "status": _ENDED},
                    {"$set": {"expire_at": from_us(due)}, "$unset": {"unstamped": ""}},
                )
                for run_id, due in found.items()
            ],
            ordered=False,
        )
        if done.modified_count < len(found):
            now = self.runs.find({"_id": {"$in": list(found)}}, {"expire_at": 1, "status": 1})
            live = [d["_id"] for d in await now.to_list() if d.get("status") not in TERMINAL]
            await self.owned.stamp(dict.fromkeys(live))  # live again: nothing may expire
        return len(found)
