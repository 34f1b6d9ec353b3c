"""At most one live run per (queue, dedup id), without a unique secondary index.

A sharded ``runs`` collection cannot carry a unique index that its shard key
(``{_id: "hashed"}``) does not prefix, so the guarantee lives in a collection of its
own, ``dedup``, whose ``_id`` is the dedup key: ``{_id: key, run_id, at_us}``.

* claim: a start inserts the claim, then the run (1 command more than a start
  without a dedup id). The ``_id`` decides between concurrent claimers.
* release: a claim whose run has ended is free, judged when the next claimer meets it
  (as the in-memory store does), so ending a run costs nothing here; purging a run
  deletes its claim.
* orphan: a claim whose run does not exist is its claimer starting, until
  :data:`ORPHAN_AFTER_S` after the claim (a start's insert gives up within the store's
  retry bound, 5 s): then its claimer died between the claim and the insert, and the
  claim is taken over. Taking over is a findAndModify guarded by the claim's old run
  id, so of concurrent takers one wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import DuplicateKeyError, OperationFailure

from engine_core.common.clock import utcnow
from engine_core.records import TERMINAL
from pikku_mongo.wire.causal import CausalReads
from pikku_mongo.wire.checks import check_str
from pikku_mongo.wire.documents import Doc
from pikku_mongo.wire.encoding import to_us, unpack
from pikku_mongo.wire.filters import eq
from pikku_mongo.wire.flow_fields import dedup_key
from pikku_mongo.wire.retry import transient_retry
from pikku_mongo.wire.skew import SkewBound
from pikku_mongo.writes.batcher import Batcher

#: How long a claim whose run does not exist belongs to its claimer (seconds).
ORPHAN_AFTER_S = 60.0


@dataclass(eq=False, kw_only=True)
class DedupOps:
    """The dedup claims of :class:`~pikku_mongo.MongoStore`."""

    runs: AsyncCollection[Doc]
    dedup: AsyncCollection[Doc]
    dedup_writes: Batcher
    reads: CausalReads
    skew: SkewBound

    @transient_retry
    async def claim(self, key: str, run_id: str, *, now: datetime | None = None) -> str | None:
        """Take the claim ``key`` (a packed dedup key) for the packed ``run_id``: None
        when it is this run's now, else the (unpacked) id of the live run holding it.
        1 insert when the key is free; else 2 finds, and 1 findAndModify to take over a
        claim whose run ended or was orphaned. Safe to repeat."""
        while True:
            at = to_us(now or utcnow())
            if await self.dedup_writes.insert({"_id": key, "run_id": run_id, "at_us": at}):
                return None
            claim = await self.reads.read_one(self.dedup, {"_id": key})
            if claim is None:
                continue  # purged between the commands
            holder = claim["run_id"]
            if holder == run_id:
                return None  # this start's own claim (a repeat, or a run started again)
            if await self._holds(claim, at):
                return unpack(holder)
            taken = await self.dedup.find_one_and_update(
                {"_id": key, "run_id": eq(holder)}, {"$set": {"run_id": run_id, "at_us": at}}
            )
            if taken is not None:
                return None
            # Another taker won: look again.

    async def _holds(self, claim: Doc, at_us: int) -> bool:
        """Whether the run of ``claim`` still holds it: it is not terminal, or it does not
        exist yet and the claim is younger than :data:`ORPHAN_AFTER_S`."""
        run = await self.reads.read_one(self.runs, {"_id": claim["run_id"]}, {"status": 1})
        if run is not None:
            return run.get("status") not in TERMINAL
        orphan_at = int(claim.get("at_us", 0)) + round(ORPHAN_AFTER_S * 1e6) + self.skew.skew_us
        return at_us < orphan_at

    @transient_retry
    async def dedup_holder(self, queue: str | None, dedup_id: str) -> str | None:
        """2 finds at most (the claim, then its run)."""
        claim = await self.reads.read_one(
            self.dedup, {"_id": dedup_key(queue, check_str(dedup_id, "dedup_id"))}
        )
        if claim is None or not await self._holds(claim, to_us(utcnow())):
            return None
        return unpack(claim["run_id"])

    async def release(self, key: str, run_id: str) -> None:
        """Give back the claim ``key`` if ``run_id`` holds it (a claim taken for a start
        that found its run id taken)."""
        await self.dedup.delete_one({"_id": key, "run_id": eq(run_id)})

    async def purge(self, run_ids: list[str]) -> None:
        """Delete the claims of the runs ``run_ids`` (packed), being deleted: 1
        delete."""
        await self.dedup.delete_many({"run_id": {"$in": run_ids}})


async def move_dedup_claims(runs: AsyncCollection[Doc], dedup: AsyncCollection[Doc]) -> int:
    """Give every live run holding a dedup id its claim, then drop the unique index that
    held the guarantee before (it blocks sharding ``runs``). Idempotent; part of the
    format 3 migration. Returns how many claims it wrote."""
    moved = 0
    cursor = runs.find({"dedup": {"$exists": True}}, {"_id": 1, "dedup": 1})
    async for doc in cursor:
        try:
            await dedup.insert_one({"_id": doc["dedup"], "run_id": doc["_id"], "at_us": 0})
            moved += 1
        except DuplicateKeyError:
            pass  # moved already (or by another process)
    try:
        await runs.drop_index("dedup_1")
    except OperationFailure:
        pass  # never created here, or dropped by another process
    return moved
