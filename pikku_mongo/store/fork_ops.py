"""Forks on MongoDB, crash-safe without transactions.

A fork is written in this order, each write durable before the next:

1. a marker in ``forks`` (``_id``: the fork's run id, ``at_us``: when it began);
2. the copied steps, as step documents of the fork's run id (:func:`copy_steps`: one
   bulk write of upserts per 1,000 steps, group-committed);
3. the fork's run document: the commit point. Until it exists nothing reads the steps
   (no sweep, listing or count looks at finished steps of a run that does not exist);
4. the marker is deleted.

A forker that dies before 3 leaves a marker and steps that no reader sees;
:meth:`ForkOps.clean_forks` (run by recovery, for markers an hour old) takes the marker,
and deletes the steps when no run was written. (A forker that stood still for that hour
between 2 and 3, then wrote its run, finds its marker gone and writes the steps again;
a pass of the fork begun in that moment would run its first steps anew.) A repeat of
the same fork (same run id, after a lost reply) finds the run and makes no second one,
or finishes the first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from pymongo.asynchronous.collection import AsyncCollection

from engine_core.common.clock import utcnow
from engine_core.errors import DuplicateRunError
from engine_core.records import RunRecord, StepRecord
from engine_core.store import Store
from pikku_mongo.wire.causal import CausalReads
from pikku_mongo.wire.checks import check_int, check_str
from pikku_mongo.wire.documents import Doc, run_from_doc
from pikku_mongo.wire.encoding import pack, to_us, unpack
from pikku_mongo.wire.filters import eq
from pikku_mongo.wire.retry import transient_retry

#: Abandoned forks undone per call of ``clean_forks``.
CLEAN_BATCH = 100


@dataclass(eq=False, kw_only=True)
class ForkOps:
    """The fork methods of :class:`~pikku_mongo.MongoStore`. A fork's steps and run are
    written as ``store`` writes steps and runs."""

    runs: AsyncCollection[Doc]
    steps: AsyncCollection[Doc]
    forks: AsyncCollection[Doc]
    reads: CausalReads
    store: Store

    async def fork_run(self, run: RunRecord, steps: Sequence[StepRecord]) -> RunRecord | None:
        """1 find; when no run has the id: 1 upsert (the marker), the steps (1 bulk write
        per 1,000 with :func:`copy_steps`), 1 insert (the run), 1 delete (the marker).
        Forking a run of 1,000 finished steps costs 5 to 6 commands."""
        fork_id = pack(check_str(run.run_id, "run id"))
        existing = await self._find_run(fork_id)
        if existing is not None:
            return existing
        await self._mark(fork_id, run)
        await copy_steps(self.store, steps)
        try:
            made = await self.store.insert_run(run)
        except DuplicateRunError:
            await self._undo(fork_id)
            raise
        if made is None and not await self._unmark(fork_id):
            # Cleaned up under us (this call stood an hour between its writes): the run
            # is written now, so the steps go back for good.
            await copy_steps(self.store, steps)
        return made

    @transient_retry
    async def _find_run(self, packed_id: str) -> RunRecord | None:
        doc = await self.reads.read_one(self.runs, {"_id": packed_id})
        return run_from_doc(doc) if doc is not None else None

    @transient_retry
    async def _mark(self, packed_id: str, run: RunRecord) -> None:
        origin = (run.forked_from or {}).get("run_id", "")
        await self.forks.update_one(
            {"_id": packed_id},
            {"$setOnInsert": {"at_us": to_us(utcnow()), "from": pack(origin)}},
            upsert=True,
        )

    @transient_retry
    async def _unmark(self, packed_id: str) -> bool:
        """Delete the fork's marker; whether it was still there."""
        return (await self.forks.delete_one({"_id": packed_id})).deleted_count > 0

    @transient_retry
    async def _undo(self, packed_id: str) -> bool:
        """Take the marker of a fork; delete its steps when its run was never written.
        Whether it undid a fork."""
        taken = await self.forks.find_one_and_delete({"_id": packed_id})
        if taken is None:
            return False
        if await self.reads.read_one(self.runs, {"_id": packed_id}, {"_id": 1}) is not None:
            return False  # made whole: only its marker was left
        await self.steps.delete_many({"run_id": eq(packed_id)})
        return True

    @transient_retry
    async def list_forks(self, run_id: str, *, limit: int) -> list[str]:
        """1 find on the sparse ``forked`` index, in creation order."""
        cursor = self.runs.find(
            {"forked": eq(pack(check_str(run_id, "run id")))}, {"_id": 1, "made": 1}
        )
        docs = await cursor.sort([("made", 1)]).limit(check_int(limit, "limit")).to_list()
        return [unpack(d["_id"]) for d in docs]

    async def clean_forks(self, before: datetime) -> int:
        """1 find of the markers older than ``before`` (at most a few exist at any time);
        per marker, 1 findAndModify, 1 find and, for a fork never made, 1 delete."""
        docs = await self._old_marks(before)
        undone = 0
        for doc in docs:
            undone += await self._undo(doc["_id"])
        return undone

    @transient_retry
    async def _old_marks(self, before: datetime) -> list[Doc]:
        cursor = self.forks.find({"at_us": {"$lt": to_us(before)}}, {"_id": 1})
        return await cursor.limit(CLEAN_BATCH).to_list()


async def copy_steps(store: Store, steps: Sequence[StepRecord]) -> None:
    """Write a fork's copied steps as the store writes step records (``save_steps``:
    whole documents, group-committed upserts guarded by attempts; safe to repeat). The
    one place that knows how a fork's steps are stored."""
    await store.save_steps(steps)
