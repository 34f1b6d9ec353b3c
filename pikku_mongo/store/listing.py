"""Lists of runs by creation time, newest or oldest first, served by one index.

Every run document carries ``made``: its creation time in microseconds, zero-padded,
then its (packed) id, as one string whose order is (creation time, run id). One
single-field index on it (nx-27017 plans with single-field indexes only) serves a page
in either direction, and ``after`` is a bound on it: no list ever sorts runs in memory.
Runs written before ``made`` existed get it once, at ``init`` (:func:`backfill_made`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from pymongo import UpdateOne
from pymongo.asynchronous.collection import AsyncCollection

from engine_core.records import RunRecord
from pikku_mongo.wire.checks import check_datetime, check_int, check_opt_str
from pikku_mongo.wire.documents import lean_run_from_doc, made_key, run_from_doc
from pikku_mongo.wire.encoding import pack, to_us, unpack
from pikku_mongo.wire.filters import eq, id_prefix_range
from pikku_mongo.wire.retry import transient_retry

log = logging.getLogger("pikku_mongo.store.listing")

Doc = dict[str, Any]
_BY_ID = [("_id", 1)]
#: The name of the index on ``made`` (see ``pikku_mongo.wire.indexes``).
MADE_INDEX = "made_1"
#: The meta document that records that every run carries ``made``.
_DONE_ID = "runs_made"
_BATCH = 500


def made_bounds(
    order: str, after_made: str | None, since_us: int | None, before_us: int | None
) -> tuple[Doc, list[tuple[str, int]]]:
    """The ``made`` range of the page after ``after_made`` within the creation times
    ``[since_us, before_us)`` (so the index serves those bounds too), and the sort of
    ``order``."""
    newest = order == "newest"
    low = None if since_us is None else f"{since_us:017d}:"  # the first key at since_us
    high = None if before_us is None else f"{before_us:017d}:"  # below: before before_us
    bound: Doc = {}
    if after_made is not None:
        if newest:
            high = after_made if high is None else min(high, after_made)
        else:
            bound["$gt"] = after_made
    if low is not None:
        bound["$gte"] = low
    if high is not None:
        bound["$lt"] = high
    return bound, [("made", -1 if newest else 1)]


async def backfill_made(meta: AsyncCollection[Doc], runs: AsyncCollection[Doc]) -> None:
    """Give ``made`` to every run document without it (an earlier version wrote it),
    once per database; idempotent and safe from several processes at once."""
    if await meta.find_one({"_id": _DONE_ID}) is not None:
        return
    filled = 0
    while True:
        docs = (
            await runs.find({"made": {"$exists": False}}, {"_id": 1, "created_at": 1})
            .limit(_BATCH)
            .to_list()
        )
        if not docs:
            break
        await runs.bulk_write(
            [
                UpdateOne(
                    {"_id": d["_id"], "made": {"$exists": False}},
                    {"$set": {"made": made_key(int(d.get("created_at") or 0), d["_id"])}},
                )
                for d in docs
            ],
            ordered=False,
        )
        filled += len(docs)
    await meta.update_one({"_id": _DONE_ID}, {"$set": {"done": True}}, upsert=True)
    if filled:
        log.info("gave %d run documents their creation-order key", filled)


@dataclass(eq=False)
class ListingOps:
    """``MongoStore``'s lists of runs, their counts by status, and the workflows that
    have runs (what the dashboard, the CLI and ``engine.list_runs`` read)."""

    runs: AsyncCollection[Doc]

    @transient_retry
    async def list_runs(
        self,
        *,
        workflow: str | None,
        status: str | None,
        limit: int,
        after: str | None,
        prefix: str | None = None,
        created_since: datetime | None = None,
        created_before: datetime | None = None,
        version: str | None = None,
        order: str = "id",
        lean: bool = False,
    ) -> list[RunRecord]:
        """1 find: by ``_id`` order with a limit; ``after`` and ``prefix`` are bounds on
        ``_id``, so the ``_id`` index serves them. By creation time (``order`` "newest"
        or "oldest"): 1 find on the ``made`` index (see ``pikku_mongo.store.listing``), and 1
        more to read the ``made`` of ``after``. ``lean``: decoded as
        :func:`~pikku_mongo.wire.documents.lean_run_from_doc` (no projection: nx-27017 reads
        whole documents anyway, and spent more on projecting them than on sending
        them)."""
        if check_int(limit, "limit") <= 0:
            return []
        query = _equalities(workflow=workflow, status=status, version=version)
        ids: Doc = {}
        if check_opt_str(prefix, "run id prefix") is not None:
            ids.update(id_prefix_range(cast(str, prefix)))
        sort = _BY_ID
        if order != "id":
            after_made = await self._made_of(after)
            if after is not None and after_made is None:
                return []  # the run the page began after is gone
            made, sort = made_bounds(
                order, after_made, _us(created_since, "created_since"),
                _us(created_before, "created_before"),
            )  # fmt: skip
            if made:
                query["made"] = made
        elif check_opt_str(after, "after") is not None:
            ids["$gt"] = pack(cast(str, after))
        if ids:
            query["_id"] = ids
        created = _created(created_since, created_before)
        if created:
            query["created_at"] = created
        cursor = self.runs.find(query).sort(sort).limit(limit)
        if order != "id" and prefix is None:
            # Walk the ``made`` index in order, filtering as it goes: never the other
            # plan, which reads every run of a workflow (or status) and sorts them.
            cursor = cursor.hint(MADE_INDEX)
        docs = await cursor.to_list()
        decode = lean_run_from_doc if lean else run_from_doc
        return [decode(doc) for doc in docs]

    async def _made_of(self, after: str | None) -> str | None:
        """The ``made`` of the run ``after`` (1 find), or None (none given, or gone)."""
        if check_opt_str(after, "after") is None:
            return None
        doc = await self.runs.find_one({"_id": pack(cast(str, after))}, {"made": 1})
        return None if doc is None else doc.get("made")

    @transient_retry
    async def count_runs(self, *, workflow: str | None = None) -> dict[str, int]:
        """1 aggregate: a ``$match``, then ``$group`` on status. Unfiltered, the match is
        a range over every status (each is a string), so MongoDB can count from the
        (status, updated_at) index without fetching the documents; of one workflow, the
        workflow index serves it. (On nx-27017 the range costs nothing, while a ``$sort``
        or an ``$in`` there made the count 15 to 20 times slower at 100,000 runs.)"""
        if check_opt_str(workflow, "workflow") is not None:
            match: Doc = {"workflow": eq(pack(cast(str, workflow)))}
        else:
            match = {"status": {"$gte": ""}}
        pipeline: list[Doc] = [
            {"$match": match},
            {"$group": {"_id": "$status", "n": {"$sum": 1}}},
        ]
        cursor = await self.runs.aggregate(pipeline)
        return {cast(str, doc["_id"]): int(doc["n"]) for doc in await cursor.to_list()}

    @transient_retry
    async def list_workflows(self) -> list[str]:
        """1 distinct on ``workflow`` (the workflow index serves it)."""
        names = await self.runs.distinct("workflow")
        return sorted(unpack(name) for name in names if isinstance(name, str))


def _equalities(*, workflow: str | None, status: str | None, version: str | None) -> Doc:
    """The filter of a list's equalities: its workflow, status and version label."""
    query: Doc = {}
    if check_opt_str(workflow, "workflow") is not None:
        query["workflow"] = eq(pack(cast(str, workflow)))
    if check_opt_str(status, "run status") is not None:
        query["status"] = eq(status)
    if check_opt_str(version, "version") is not None:
        query["version"] = eq(pack(cast(str, version)))
    return query


def _us(moment: datetime | None, what: str) -> int | None:
    return None if moment is None else to_us(check_datetime(moment, what))


def _created(since: datetime | None, before: datetime | None) -> Doc:
    """The range of creation times ``[since, before)`` (either may be open)."""
    created: Doc = {}
    if since is not None:
        created["$gte"] = _us(since, "created_since")
    if before is not None:
        created["$lt"] = _us(before, "created_before")
    return created
