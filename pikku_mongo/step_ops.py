"""``MongoStore``'s operations on the ``steps`` collection: step records and the queue.

Each step document's ``_id`` is built from its run id and key
(:func:`~pikku_mongo.documents.step_doc_id`), so every write to one step is addressed by
``_id``; a run's steps are found by the single-field ``run_id`` index. A dispatched
step's document is its queue job.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, cast

from pymongo.asynchronous.collection import AsyncCollection

from engine_core.records import AttemptEntry, StepGuard, StepPage, StepRecord, utcnow
from pikku_mongo.batcher import Batcher, Doc
from pikku_mongo.checks import (
    check_bool,
    check_datetime,
    check_int,
    check_str,
    check_strs,
)
from pikku_mongo.documents import entry_from_text, step_doc_id, step_from_doc, step_to_doc
from pikku_mongo.encoding import pack, to_us
from pikku_mongo.filters import (
    check_changes,
    claim_filter,
    eq,
    guard_filter,
    lapsed_claims_filter,
    scheduled_from,
    step_id,
    step_update,
    step_upsert,
)
from pikku_mongo.retry import surface_oversize, transient_retry
from pikku_mongo.skew import SkewBound

_LEAST_RECENT = [("updated_at", 1)]
#: What a recovery sweep judges a scheduled step by (decoding whole steps cost more than
#: reading them).
_SWEPT = {f: 1 for f in ("run_id", "key", "kind", "status", "due_at", "child_run_id")}


class StepOps(SkewBound):
    """The step and queue methods of :class:`~pikku_mongo.MongoStore`."""

    steps: AsyncCollection[Doc]
    step_writes: Batcher

    @transient_retry
    async def load_steps(self, run_id: str) -> list[StepRecord]:
        """1 find by ``run_id`` (plus a getMore per further batch)."""
        cursor = self.steps.find({"run_id": eq(pack(check_str(run_id, "run id")))})
        return [step_from_doc(doc) for doc in await cursor.to_list()]

    @transient_retry
    async def load_steps_of(self, run_ids: Sequence[str]) -> dict[str, list[StepRecord]]:
        """1 find by ``run_id`` (``$in``; plus a getMore per further batch)."""
        found: dict[str, list[StepRecord]] = {check_str(run_id, "run id"): [] for run_id in run_ids}
        if not found:
            return found
        cursor = self.steps.find({"run_id": {"$in": [pack(r) for r in sorted(found)]}})
        for doc in await cursor.to_list():
            step = step_from_doc(doc)
            found.setdefault(step.run_id, []).append(step)
        return found

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
            step_from_doc(doc)
            for doc in await self.steps.find(
                {"_id": {"$in": ids}, "run_id": eq(pack(run_id))}
            ).to_list()
        ]

    @surface_oversize
    async def save_steps(self, steps: Sequence[StepRecord]) -> None:
        """1 upsert per step, group-committed: guarded by attempts, so a step with more
        attempts stored than this record has is left as it is (its duplicate key is
        the guard failing). Safe to repeat."""
        await asyncio.gather(*(self.step_writes.upsert(*step_upsert(s)) for s in steps))

    @surface_oversize
    async def insert_step(self, step: StepRecord) -> bool:
        """1 insert, group-committed (the ``_id`` decides). The document carries an
        insert id, so an insert repeated after a lost reply that collides with its own
        first try reports it inserted (1 find then), not armed by someone else."""
        doc = step_to_doc(step)
        doc["ins"] = nonce = uuid.uuid4().hex

        async def confirm() -> bool:
            return await self._matches(
                {"_id": doc["_id"], "run_id": eq(doc["run_id"]), "ins": nonce}
            )

        return await self.step_writes.insert(doc, confirm)

    @surface_oversize
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
                return await self._has_entry(query, entry)

        return await self.step_writes.guarded(query, update, confirm)

    @transient_retry
    async def _matches(self, query: Doc) -> bool:
        return await self.steps.find_one(query, {"_id": 1}) is not None

    @transient_retry
    async def _has_entry(self, query: Doc, entry: AttemptEntry) -> bool:
        where = {"_id": query["_id"], "run_id": query["run_id"]}
        doc = await self.steps.find_one(where, {"history": 1})
        history = cast(list[str], (doc or {}).get("history") or [])
        return any(entry_from_text(item) == entry for item in history)

    @transient_retry
    async def find_unnotified_steps(self, before: datetime, limit: int) -> list[StepRecord]:
        """1 find."""
        if check_int(limit, "limit") <= 0:
            return []
        query: Doc = {
            "notified": eq(False),
            "updated_at": {"$lt": to_us(check_datetime(before, "before"))},
        }
        docs = await self.steps.find(query).sort(_LEAST_RECENT).limit(limit).to_list()
        return [step_from_doc(doc) for doc in docs]

    # ---- the queue ----------------------------------------------------------------

    @transient_retry
    async def claim_steps(
        self, functions: Sequence[str], *, holder: str, claim_ttl: float, limit: int
    ) -> list[StepRecord]:
        """1 find of the jobs due first (the claim index), then 1 group-committed bulk of
        guarded claims, one per job: its guard (still ``scheduled``, the same attempts,
        not halted) holds for exactly one of any number of concurrent claimers. (A
        repeat after a lost reply finds its own claims landed: each confirms by its
        holder and attempt.)"""
        wanted = {pack(f) for f in check_strs(functions, "step function")}
        if check_int(limit, "limit") <= 0 or not wanted:
            return []
        now = utcnow()
        expires = now + timedelta(seconds=self._ttl(claim_ttl, "claim_ttl"))
        who = pack(check_str(holder, "claim holder"))
        cursor = self.steps.find(claim_filter(now)).sort([("due_at", 1)]).limit(limit * 4)
        candidates = [d for d in await cursor.to_list() if d.get("function") in wanted]
        claim = {
            "status": "running",
            "claim_holder": who,
            "claim_expires_at": to_us(expires),
            "updated_at": to_us(now),
        }

        async def one(doc: Doc) -> StepRecord | None:
            attempts = int(doc.get("attempts", 0))
            guard = {
                "_id": doc["_id"],
                "run_id": eq(doc["run_id"]),
                "status": eq("scheduled"),
                "attempts": eq(attempts),
                "halted": eq(False),
            }

            async def confirm() -> bool:
                mine = {**guard, "claim_holder": eq(who), "attempts": eq(attempts + 1)}
                del mine["status"], mine["halted"]
                return await self._matches(mine)

            landed = await self.step_writes.guarded(
                guard, {"$set": claim, "$inc": {"attempts": 1}}, confirm
            )
            if not landed:
                return None
            doc.update(claim, attempts=attempts + 1)
            return step_from_doc(doc)

        won: list[StepRecord] = []
        while candidates and len(won) < limit:
            # A claim lost to a rival goes to the next candidate.
            take, candidates = candidates[: limit - len(won)], candidates[limit - len(won) :]
            won += [s for s in await asyncio.gather(*(one(d) for d in take)) if s is not None]
        return won

    @transient_retry
    async def find_claims(self, holder: str) -> list[StepRecord]:
        """1 find (the claim index's (status, kind) prefix)."""
        query = {
            "status": eq("running"),
            "kind": eq("dispatch"),
            "claim_holder": eq(pack(check_str(holder, "claim holder"))),
        }
        return [step_from_doc(doc) for doc in await self.steps.find(query).to_list()]

    @transient_retry
    async def requeue_lapsed_claims(self) -> int:
        """1 update_many, guarded by the lapsed claim (safe to repeat); lapsed means
        ``max_clock_skew`` past its expiry by this host's clock."""
        now = utcnow()
        result = await self.steps.update_many(
            lapsed_claims_filter(now - timedelta(microseconds=self._skew_us)),
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
        """1 update, group-committed, guarded by holder, attempt and the claim not yet
        counted lost (``max_clock_skew`` before its expiry)."""
        now = utcnow()
        query = step_id(run_id, key)
        query.update(
            status=eq("running"),
            claim_holder=eq(pack(check_str(holder, "claim holder"))),
            attempts=eq(check_int(attempt, "attempt")),
            claim_expires_at={"$gt": to_us(now) + self._skew_us},
        )
        expires = now + timedelta(seconds=self._ttl(claim_ttl, "claim_ttl"))
        return await self.step_writes.guarded(query, {"$set": {"claim_expires_at": to_us(expires)}})

    @transient_retry
    async def halt_steps(self, run_id: str, halted: bool) -> None:
        """1 update (multi)."""
        await self.steps.update_many(
            {"run_id": eq(pack(check_str(run_id, "run id"))), "kind": eq("dispatch")},
            {"$set": {"halted": check_bool(halted, "halted")}},
        )

    @transient_retry
    async def find_scheduled_steps(
        self, limit: int, after: StepPage | None = None
    ) -> list[StepRecord]:
        """1 find in ``due_at`` order (the (status, due_at) index), keyset-paginated; when
        the page ends inside a group of steps due at the same moment, 1 more find for
        the rest of that group, so the next page starts strictly after it. No skip, no
        ``$or``: each page costs what it returns, however many steps are parked."""
        if check_int(limit, "limit") <= 0:
            return []
        if after is not None:  # the page's last row: only its time bounds the next page
            check_str(after.run_id, "page run id")
            check_str(after.key, "page key")
        query = scheduled_from(after.due_at if after is not None else None)
        if after is not None:
            query["due_at"]["$gt"] = query["due_at"].pop("$gte")
        cursor = self.steps.find(query, _SWEPT).sort([("due_at", 1)]).limit(limit)
        docs = await cursor.to_list()
        if len(docs) == limit:
            last = docs[-1]["due_at"]
            seen = {d["_id"] for d in docs if d["due_at"] == last}
            rest = self.steps.find({"status": eq("scheduled"), "due_at": eq(last)}, _SWEPT)
            docs += [d for d in await rest.to_list() if d["_id"] not in seen]
        steps = [step_from_doc(doc) for doc in docs]
        steps.sort(key=lambda s: (s.due_at, s.run_id, s.key))
        return steps
