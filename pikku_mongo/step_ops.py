"""``MongoStore``'s operations on the ``steps`` collection: step records and the queue.

Each step document's ``_id`` is built from its run id and key
(:func:`~pikku_mongo.documents.step_doc_id`), so every write to one step is addressed by
``_id``; a run's steps are found by the single-field ``run_id`` index. A dispatched
step's document is its queue job.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, cast

from pymongo import ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection

from engine_core.records import AttemptEntry, StepGuard, StepPage, StepRecord, utcnow
from pikku_mongo.batcher import Batcher, Doc
from pikku_mongo.checks import check_bool, check_datetime, check_int, check_seconds, check_str
from pikku_mongo.documents import (
    entry_from_text,
    pack,
    step_doc_id,
    step_from_doc,
    step_to_doc,
    to_us,
)
from pikku_mongo.filters import (
    CLAIM_SORT,
    SCHEDULED_SORT,
    check_changes,
    claim_filter,
    guard_filter,
    lapsed_claims_filter,
    scheduled_match,
    step_id,
    step_update,
)
from pikku_mongo.retry import transient_retry

_LEAST_RECENT = [("updated_at", 1)]


class StepOps:
    """The step and queue methods of :class:`~pikku_mongo.MongoStore`."""

    steps: AsyncCollection[Doc]
    step_writes: Batcher

    @transient_retry
    async def load_steps(self, run_id: str) -> list[StepRecord]:
        """1 find by ``run_id`` (plus a getMore per further batch)."""
        cursor = self.steps.find({"run_id": pack(check_str(run_id, "run id"))})
        return [step_from_doc(doc) for doc in await cursor.to_list()]

    @transient_retry
    async def get_step(self, run_id: str, key: str) -> StepRecord | None:
        """1 find by ``_id``."""
        doc = await self.steps.find_one(step_id(run_id, key))
        return step_from_doc(doc) if doc is not None else None

    @transient_retry
    async def get_steps(self, run_id: str, keys: Iterable[str]) -> list[StepRecord]:
        """1 find by ``_id`` (``$in``)."""
        ids = sorted({step_doc_id(run_id, k) for k in keys})
        if not ids:
            return []
        return [
            step_from_doc(doc) for doc in await self.steps.find({"_id": {"$in": ids}}).to_list()
        ]

    async def save_steps(self, steps: Sequence[StepRecord]) -> None:
        """1 upsert per step, group-committed: guarded by attempts, so a step with more
        attempts stored than this record has is left as it is (its duplicate key is
        the guard failing). Safe to repeat."""
        writes = []
        for step in steps:
            doc = step_to_doc(step)
            guard = {
                "_id": doc.pop("_id"),
                "attempts": {"$lte": check_int(step.attempts, "attempts")},
            }
            writes.append(self.step_writes.upsert(guard, {"$set": doc}))
        await asyncio.gather(*writes)

    async def insert_step(self, step: StepRecord) -> bool:
        """1 insert, group-committed (the ``_id`` decides)."""
        return await self.step_writes.insert(step_to_doc(step))

    async def update_step(
        self,
        run_id: str,
        key: str,
        *,
        guard: StepGuard,
        changes: dict[str, Any],
        entry: AttemptEntry | None = None,
    ) -> bool:
        """1 update, group-committed. Sent again after a lost reply, a write with a history
        ``entry`` that finds its guard failed first looks whether the entry landed (its
        first try did), so it neither appends twice nor reports a write that landed as
        fenced out."""
        check_changes(changes)
        query = guard_filter(run_id, key, guard)
        update = step_update(changes, entry)
        if not update:
            return await self._matches(query)
        confirm = None
        if entry is not None:

            async def confirm() -> bool:
                return await self._has_entry(query["_id"], entry)

        return await self.step_writes.guarded(query, update, confirm)

    @transient_retry
    async def _matches(self, query: Doc) -> bool:
        return await self.steps.find_one(query, {"_id": 1}) is not None

    @transient_retry
    async def _has_entry(self, doc_id: str, entry: AttemptEntry) -> bool:
        doc = await self.steps.find_one({"_id": doc_id}, {"history": 1})
        history = cast(list[str], (doc or {}).get("history") or [])
        return any(entry_from_text(item) == entry for item in history)

    @transient_retry
    async def find_unnotified_steps(self, before: datetime, limit: int) -> list[StepRecord]:
        """1 find."""
        if check_int(limit, "limit") <= 0:
            return []
        query: Doc = {
            "notified": False,
            "updated_at": {"$lt": to_us(check_datetime(before, "before"))},
        }
        docs = await self.steps.find(query).sort(_LEAST_RECENT).limit(limit).to_list()
        return [step_from_doc(doc) for doc in docs]

    # ---- the queue ----------------------------------------------------------------

    @transient_retry
    async def claim_step(
        self, functions: Sequence[str], *, holder: str, claim_ttl: float
    ) -> StepRecord | None:
        """1 findAndModify: the filter is the eligibility guard, so of concurrent
        claimers exactly one matches each job attempt. (A repeat after a lost reply may
        claim a second job; the first one's claim then lapses and it goes back to the
        queue, as it would had the repeat not happened.)"""
        if not functions:
            return None
        now = utcnow()
        expires = now + timedelta(seconds=check_seconds(claim_ttl, "claim_ttl"))
        doc = await self.steps.find_one_and_update(
            claim_filter(functions, now),
            {
                "$set": {
                    "status": "running",
                    "claim_holder": pack(check_str(holder, "claim holder")),
                    "claim_expires_at": to_us(expires),
                    "updated_at": to_us(now),
                },
                "$inc": {"attempts": 1},
            },
            sort=CLAIM_SORT,
            return_document=ReturnDocument.AFTER,
        )
        return step_from_doc(doc) if doc is not None else None

    @transient_retry
    async def requeue_lapsed_claims(self) -> int:
        """1 update_many, guarded by the lapsed claim (safe to repeat)."""
        now = utcnow()
        result = await self.steps.update_many(
            lapsed_claims_filter(now),
            {
                "$set": {
                    "status": "scheduled",
                    "due_at": to_us(now),
                    "claim_holder": None,
                    "claim_expires_at": None,
                    "updated_at": to_us(now),
                }
            },
        )
        return int(result.modified_count)

    async def extend_claim(
        self, run_id: str, key: str, *, holder: str, attempt: int, claim_ttl: float
    ) -> bool:
        """1 update, group-committed, guarded by holder and attempt."""
        query = step_id(run_id, key)
        query.update(
            status="running",
            claim_holder=pack(check_str(holder, "claim holder")),
            attempts=check_int(attempt, "attempt"),
        )
        expires = utcnow() + timedelta(seconds=check_seconds(claim_ttl, "claim_ttl"))
        return await self.step_writes.guarded(query, {"$set": {"claim_expires_at": to_us(expires)}})

    @transient_retry
    async def halt_steps(self, run_id: str, halted: bool) -> None:
        """1 update (multi)."""
        await self.steps.update_many(
            {"run_id": pack(check_str(run_id, "run id")), "kind": "dispatch"},
            {"$set": {"halted": check_bool(halted, "halted")}},
        )

    @transient_retry
    async def find_scheduled_steps(
        self, limit: int, after: StepPage | None = None
    ) -> list[StepRecord]:
        """1 aggregate ($match, $sort, $limit): keyset pagination, no skip."""
        if check_int(limit, "limit") <= 0:
            return []
        pipeline: list[Doc] = [
            {"$match": scheduled_match(after)},
            {"$sort": SCHEDULED_SORT},
            {"$limit": limit},
        ]
        cursor = await self.steps.aggregate(pipeline)
        return [step_from_doc(doc) for doc in await cursor.to_list()]
