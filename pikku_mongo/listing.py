"""Lists of runs by creation time, newest or oldest first, served by one index.

Every run document carries ``made``: its creation time in microseconds, zero-padded,
then its (packed) id, as one string whose order is (creation time, run id). One
single-field index on it (nx-27017 plans with single-field indexes only) serves a page
in either direction, and ``after`` is a bound on it: no list ever sorts runs in memory.
Runs written before ``made`` existed get it once, at ``init`` (:func:`backfill_made`).
"""

from __future__ import annotations

import logging
from typing import Any

from pymongo import UpdateOne
from pymongo.asynchronous.collection import AsyncCollection

log = logging.getLogger("pikku_mongo.listing")

Doc = dict[str, Any]
#: The meta document that records that every run carries ``made``.
_DONE_ID = "runs_made"
_BATCH = 500


def made_key(created_us: int, packed_id: str) -> str:
    """The ``made`` value of a run document."""
    return f"{created_us:017d}:{packed_id}"


def made_bounds(order: str, after_made: str | None) -> tuple[Doc, list[tuple[str, int]]]:
    """The ``made`` range of the page after ``after_made`` and the sort of ``order``."""
    newest = order == "newest"
    bound: Doc = {}
    if after_made is not None:
        bound["$lt" if newest else "$gt"] = after_made
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
