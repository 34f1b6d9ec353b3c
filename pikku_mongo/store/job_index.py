"""Targeted polling: an index of claimable queue jobs in an unsharded collection.

On a sharded cluster (docs/guides/sharding.md) ``steps`` is sharded on ``{run_id: "hashed"}``, so a
worker's poll for due jobs by status and due time names no shard key and goes to every
shard, at every poll of every process. With targeted polling on, the store keeps one
small document per claimable job in ``jobs`` (left unsharded: it lives on the primary
shard, so reading it goes to one shard)::

    {_id: the step document's _id, run_id, fn: the step function, due: due_at (µs),
     v: a nonce of this entry}

A poll reads the entries of its functions due first (the ``(fn, due)`` index), then the
step documents they name by ``_id`` and ``run_id`` (``$in``: only the shards that own
those runs), claims them with the same guarded writes as without the index, and deletes
in one ``delete_many`` the entries it claimed or found stale. An entry is deleted only
with the nonce it was read with, so an entry written again meanwhile (a job put back on
the queue) survives.

The index is a hint; the step document's guarded claim stays the authority, so a stale
entry can never make a job run twice. An entry is written after the step write that
made the job claimable has landed (never before: a poll in between would find the job
not claimable and delete the entry). A process that dies between the two leaves a job
with no entry: the recovery sweep (under the recovery lease, every
``recovery_interval``) writes an entry for every claimable job that has none
(:meth:`JobIndex.restore`), so no job is stranded past one sweep.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from pymongo import ASCENDING, IndexModel, UpdateOne
from pymongo.asynchronous.collection import AsyncCollection

from pikku_mongo.wire.documents import Doc
from pikku_mongo.wire.filters import claim_filter, eq
from pikku_mongo.wire.retry import transient_retry
from pikku_mongo.writes.batcher import Batcher

#: The poll's read: the jobs of some functions due by now, earliest first.
JOB_INDEXES = [IndexModel([("fn", ASCENDING), ("due", ASCENDING)])]
#: Claimable jobs the recovery sweep reads per page while restoring entries.
RESTORE_PAGE = 1000
#: What an entry is made from (a step document's fields).
_ENTRY_FIELDS = {"_id": 1, "run_id": 1, "function": 1, "due_at": 1, "kind": 1}
_ENTRY_FIELDS |= {"status": 1, "halted": 1}


def claimable(doc: Doc) -> bool:
    """Whether a step document (as stored) is a job a worker may claim once due."""
    return (
        doc.get("kind") == "dispatch"
        and doc.get("status") == "scheduled"
        and not doc.get("halted")
        and isinstance(doc.get("function"), str)
        and isinstance(doc.get("due_at"), int)
    )


def _entry(doc: Doc) -> tuple[Doc, Doc]:
    """The filter and update of ``doc``'s entry (upserted; a fresh nonce, so a poll
    that read an older entry does not delete this one)."""
    fields = {"run_id": doc["run_id"], "fn": doc["function"], "due": doc["due_at"]}
    return {"_id": doc["_id"]}, {"$set": {**fields, "v": uuid.uuid4().hex}}


class JobIndex:
    """The ``jobs`` collection of one store (see the module docstring)."""

    def __init__(self, jobs: AsyncCollection[Doc], steps: AsyncCollection[Doc]) -> None:
        self.jobs = jobs
        self.steps = steps
        self._writes = Batcher(jobs, {"fn": {"$exists": False}})

    async def create_indexes(self) -> None:
        """1 ``createIndexes`` (the poll's read: by function and due time)."""
        await self.jobs.create_indexes(JOB_INDEXES)

    async def add(self, docs: Iterable[Doc]) -> None:
        """An entry for each of ``docs`` (stored step documents) that is claimable: 1
        upsert each, group-committed."""
        writes = []
        for doc in docs:
            if claimable(doc):
                writes.append(self._writes.upsert(*_entry(doc)))
        if writes:
            await asyncio.gather(*writes)

    @transient_retry
    async def refresh(self, where: Doc) -> None:
        """The entries of the step documents ``where`` matches (a filter naming the run
        id): 1 targeted find, then 1 upsert per claimable job."""
        await self.add(await self.steps.find(where, _ENTRY_FIELDS).to_list())

    @transient_retry
    async def due(self, functions: Sequence[str], now_us: int, limit: int) -> list[Doc]:
        """1 find of the entries of ``functions`` (packed) due by ``now_us``, earliest
        first."""
        query = {"fn": {"$in": sorted(functions)}, "due": {"$lte": now_us}}
        cursor = self.jobs.find(query).sort([("due", ASCENDING)]).limit(limit)
        return await cursor.to_list()

    @transient_retry
    async def steps_of(self, entries: Sequence[Doc], query: Doc) -> list[Doc]:
        """1 find of the step documents ``entries`` name that match ``query``: by
        ``_id`` and by shard key (``$in``), so only the shards owning those runs
        answer."""
        ids = [e["_id"] for e in entries]
        runs = sorted({e["run_id"] for e in entries})
        where = {"_id": {"$in": ids}, "run_id": {"$in": runs}, **query}
        return await self.steps.find(where).to_list()

    @transient_retry
    async def drop(self, entries: Sequence[Doc]) -> None:
        """1 ``delete_many`` of ``entries``, each only as it was read (its nonce)."""
        if entries:
            ids, nonces = [e["_id"] for e in entries], [e["v"] for e in entries]
            await self.jobs.delete_many({"_id": {"$in": ids}, "v": {"$in": nonces}})

    async def restore(self, now: datetime) -> int:
        """The recovery sweep's part (under the recovery lease): an entry for every job
        claimable by ``now`` that has none. Pages of the claimable jobs in due order (1
        find each, to every shard; 1 more when a page ends inside a group due at the
        same time), 1 find of their entries, 1 bulk of the missing ones. How many it
        wrote."""
        written = 0
        after: int | None = None
        while True:
            page = await self._claimable_page(now, after)
            if not page:
                return written
            have = await self._entry_ids([d["_id"] for d in page])
            missing = [
                UpdateOne(*_entry(d), upsert=True)
                for d in page
                if d["_id"] not in have and claimable(d)
            ]
            if missing:
                await self._bulk(missing)
                written += len(missing)
            if len(page) < RESTORE_PAGE:
                return written
            after = page[-1]["due_at"]

    @transient_retry
    async def _claimable_page(self, now: datetime, after: int | None) -> list[Doc]:
        """Claimable jobs due after ``after`` (strictly), a page in due order; a page
        that ends inside a group due at the same time takes the rest of the group."""
        query = claim_filter(now)
        if after is not None:
            query["due_at"]["$gte"] = after + 1
        cursor = self.steps.find(query, _ENTRY_FIELDS).sort([("due_at", ASCENDING)])
        page = await cursor.limit(RESTORE_PAGE).to_list()
        if len(page) == RESTORE_PAGE:
            last = page[-1]["due_at"]
            seen = {d["_id"] for d in page}
            tie = {**claim_filter(now), "due_at": eq(last)}
            rest = await self.steps.find(tie, _ENTRY_FIELDS).to_list()
            page += [d for d in rest if d["_id"] not in seen]
        return page

    @transient_retry
    async def _entry_ids(self, ids: Sequence[Any]) -> set[Any]:
        found = await self.jobs.find({"_id": {"$in": list(ids)}}, {"_id": 1}).to_list()
        return {d["_id"] for d in found}

    @transient_retry
    async def _bulk(self, writes: Sequence[UpdateOne]) -> None:
        await self.jobs.bulk_write(list(writes), ordered=False)
