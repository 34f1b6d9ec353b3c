"""Targeted polling: an index of the runs waiting in queue lines, in an unsharded collection.

On a sharded cluster ``runs`` is sharded on ``{_id: "hashed"}``, so an admitter's read
of its queue's line by ``line`` goes to every shard at each admission round. With
targeted polling on, the store keeps one small document per run waiting in a line in
``lines`` (unsharded: one shard)::

    {_id: the run id (packed), line: its line key, v: a nonce of this entry}

An admission round reads the head of the line from ``lines`` (a range of its ``line``
index), then those runs by ``_id`` (``$in``: only the shards owning them); an entry
whose run is no longer in that place of the line is deleted in the same round (one
``delete_many``, each entry only with the nonce it was read with). As with the job
index (:mod:`pikku_mongo.store.job_index`), an entry is written after the write that put its
run in the line, the run document stays the authority (admission is guarded by the run
still being in its line), and the recovery sweep writes an entry for every run in a
line that has none.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from pymongo import ASCENDING, IndexModel, UpdateOne
from pymongo.asynchronous.collection import AsyncCollection

from pikku_mongo.wire.documents import Doc
from pikku_mongo.wire.retry import transient_retry
from pikku_mongo.writes.batcher import Batcher

LINE_INDEXES = [IndexModel([("line", ASCENDING)])]
#: Runs in lines the recovery sweep reads per page while restoring entries.
RESTORE_PAGE = 1000


def _entry(run_id: Any, line: str) -> tuple[Doc, Doc]:
    return {"_id": run_id}, {"$set": {"line": line, "v": uuid.uuid4().hex}}


class LineIndex:
    """The ``lines`` collection of one store (see the module docstring)."""

    def __init__(self, lines: AsyncCollection[Doc], runs: AsyncCollection[Doc]) -> None:
        self.lines = lines
        self.runs = runs
        self._writes = Batcher(lines, {"line": {"$exists": False}})
        # The nonces of the entries this process read last (run id -> nonce), and the
        # entries of runs it has admitted since: the next read deletes those first, so
        # it does not read them again as stale.
        self._read: dict[Any, str] = {}
        self._gone: list[tuple[Any, str]] = []

    def admitted(self, run_ids: Iterable[Any]) -> None:
        """Runs (packed ids) this process admitted: their entries, as read, go with the
        next :meth:`head` (no command now)."""
        for run_id in run_ids:
            nonce = self._read.pop(run_id, None)
            if nonce is not None:
                self._gone.append((run_id, nonce))

    async def create_indexes(self) -> None:
        """1 ``createIndexes`` (the head of a line: by line key)."""
        await self.lines.create_indexes(LINE_INDEXES)

    async def add(self, docs: Iterable[Doc]) -> None:
        """An entry for each of ``docs`` (run documents, or ``{_id, line}``) in a line:
        1 upsert each, group-committed."""
        writes = [
            self._writes.upsert(*_entry(d["_id"], d["line"]))
            for d in docs
            if isinstance(d.get("line"), str)
        ]
        if writes:
            await asyncio.gather(*writes)

    @transient_retry
    async def head(self, bounds: Doc, limit: int, fields: Doc) -> list[Doc]:
        """The run documents at the head of a line (``bounds`` on the line key), in line
        order, read with the projection ``fields`` (which keeps ``line``): 1
        ``delete_many`` of the entries of the runs this process admitted since its last
        read (when there are some), 1 find of the entries, 1 find of their runs by
        ``_id``, and, when some entries are stale (their runs admitted elsewhere,
        cancelled...), 1 ``delete_many`` of those and 1 more read of entries past them
        (up to 4 reads in all)."""
        found: list[Doc] = []
        gone, self._gone = self._gone, []
        await self._drop([{"_id": run_id, "v": nonce} for run_id, nonce in gone])
        if len(self._read) > 10 * limit:  # runs read but admitted elsewhere, or never
            self._read.clear()
        for _ in range(4):
            want = limit - len(found)
            cursor = self.lines.find({"line": bounds}).sort([("line", ASCENDING)])
            entries = await cursor.limit(want).to_list()
            if not entries:
                break
            runs = {
                d["_id"]: d
                for d in await self.runs.find(
                    {"_id": {"$in": [e["_id"] for e in entries]}}, fields
                ).to_list()
            }
            stale = [e for e in entries if runs.get(e["_id"], {}).get("line") != e["line"]]
            found += [runs[e["_id"]] for e in entries if e not in stale]
            self._read.update((e["_id"], e["v"]) for e in entries if e not in stale)
            await self._drop(stale)
            if not stale or len(entries) < want:
                break
            bounds = {**bounds, "$gt": entries[-1]["line"]}
            bounds.pop("$gte", None)
        return found

    async def _drop(self, stale: Sequence[Doc]) -> None:
        if stale:
            ids, nonces = [e["_id"] for e in stale], [e["v"] for e in stale]
            await self.lines.delete_many({"_id": {"$in": ids}, "v": {"$in": nonces}})

    async def restore(self) -> int:
        """The recovery sweep's part (under the recovery lease): an entry for every run
        in a line that has none. Pages of ``runs`` in line order (1 find each, to every
        shard), 1 find of their entries, 1 bulk of the missing ones."""
        written = 0
        after: str | None = None
        while True:
            page = await self._page(after)
            if not page:
                return written
            have = await self._entries([d["_id"] for d in page])
            missing = [
                UpdateOne(*_entry(d["_id"], d["line"]), upsert=True)
                for d in page
                if have.get(d["_id"]) != d["line"]
            ]
            if missing:
                await self.lines.bulk_write(missing, ordered=False)
                written += len(missing)
            if len(page) < RESTORE_PAGE:
                return written
            after = page[-1]["line"]

    @transient_retry
    async def _page(self, after: str | None) -> list[Doc]:
        # Line keys are unique (each ends with its run id): no ties to page around.
        query: Doc = {"line": {"$gt": after} if after is not None else {"$exists": True}}
        cursor = self.runs.find(query, {"_id": 1, "line": 1}).sort([("line", ASCENDING)])
        return await cursor.limit(RESTORE_PAGE).to_list()

    @transient_retry
    async def _entries(self, ids: Sequence[Any]) -> dict[Any, Any]:
        found = await self.lines.find({"_id": {"$in": list(ids)}}).to_list()
        return {d["_id"]: d.get("line") for d in found}
