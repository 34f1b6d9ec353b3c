"""``MongoStore``'s operations on the ``steps`` collection: step records and the queue.

Each step document's ``_id`` is built from its run id and key
(:func:`~pikku_mongo.wire.documents.step_doc_id`), so every write to one step is addressed by
``_id``; a run's steps are found by the single-field ``run_id`` index. A dispatched
step's document is its queue job.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from pymongo.asynchronous.collection import AsyncCollection

from engine_core.common.clock import utcnow
from engine_core.records import AttemptEntry, StepGuard, StepPage, StepRecord
from pikku_mongo.store.targeting import Targeting
from pikku_mongo.wire.causal import CausalReads
from pikku_mongo.wire.checks import (
    check_bool,
    check_datetime,
    check_int,
    check_str,
    check_strs,
)
from pikku_mongo.wire.documents import (
    Doc,
    entry_from_text,
    step_doc_id,
    step_from_doc,
    step_to_doc,
)
from pikku_mongo.wire.encoding import pack, to_us
from pikku_mongo.wire.filters import (
    check_changes,
    claim_filter,
    eq,
    guard_filter,
    lapsed_claims_filter,
    one_of,
    scheduled_from,
    step_id,
    step_update,
    step_upsert,
)
from pikku_mongo.wire.retry import surface_oversize, transient_retry
from pikku_mongo.wire.skew import SkewBound
from pikku_mongo.writes.batcher import Batcher
from pikku_mongo.writes.journal_pages import steps_of_docs

_LEAST_RECENT = [("updated_at", 1)]
#: What a recovery sweep judges a scheduled step by (decoding whole steps cost more than
#: reading them).
_SWEPT = {f: 1 for f in ("run_id", "key", "kind", "status", "due_at", "child_run_id")}


@dataclass(eq=False, kw_only=True)
class StepOps:
    """The step and queue methods of :class:`~pikku_mongo.MongoStore`."""

    steps: AsyncCollection[Doc]
    step_writes: Batcher
    #: The job and line indexes, when targeted polling is on.
    targeting: Targeting
    reads: CausalReads
    skew: SkewBound

    @transient_retry
    async def load_steps(self, run_id: str) -> list[StepRecord]:
        """1 find by ``run_id`` (plus a getMore per further batch)."""
        query = {"run_id": eq(pack(check_str(run_id, "run id")))}
        return steps_of_docs(await self.reads.read_all(self.steps, query))

    @transient_retry
    async def load_steps_of(
        self, run_ids: Sequence[str], *, lean: bool = False
    ) -> dict[str, list[StepRecord]]:
        """1 find by ``run_id`` (:func:`~pikku_mongo.wire.filters.one_of`; plus a getMore per
        further batch)."""
        found: dict[str, list[StepRecord]] = {check_str(run_id, "run id"): [] for run_id in run_ids}
        if not found:
            return found
        query = {"run_id": one_of([pack(r) for r in found])}
        for step in steps_of_docs(await self.reads.read_all(self.steps, query), lean=lean):
            found.setdefault(step.run_id, []).append(step)
        return found

    @transient_retry
    async def get_step(self, run_id: str, key: str) -> StepRecord | None:
        """1 find by ``_id``."""
        doc = await self.reads.read_one(self.steps, step_id(run_id, key))
        return step_from_doc(doc) if doc is not None else None

    @transient_retry
    async def get_steps(self, run_id: str, keys: Iterable[str]) -> list[StepRecord]:
        """1 find by ``_id`` (``$in``)."""
        ids = sorted({step_doc_id(run_id, k) for k in keys})
        if not ids:
            return []
        return [
            step_from_doc(doc)
            for doc in await self.reads.read_all(
                self.steps, {"_id": {"$in": ids}, "run_id": eq(pack(run_id))}
            )
        ]

    @surface_oversize
    async def save_steps(self, steps: Sequence[StepRecord]) -> None:
        """1 upsert per step, group-committed: guarded by attempts, so a step with more
        attempts stored than this record has is left as it is (its duplicate key is
        the guard failing). Safe to repeat."""
        upserts = [step_upsert(step) for step in steps]
        await asyncio.gather(*(self.step_writes.upsert(*upsert) for upsert in upserts))
        if self.targeting.job_index is not None:
            # Whole documents, ``_id`` back in (only when targeted polling is on).
            docs = [{"_id": guard["_id"], **update["$set"]} for guard, update in upserts]
            await self.targeting.job_index.add(docs)

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

        inserted = await self.step_writes.insert(doc, confirm)
        jobs = self.targeting.job_index
        if inserted and jobs is not None:
            await jobs.add([doc])  # after the job: see pikku_mongo.store.job_index
        return inserted

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

        landed = await self.step_writes.guarded(query, update, confirm)
        if landed and self.targeting.job_index is not None and _requeues(changes):
            await self.targeting.job_index.refresh(step_id(run_id, key))
        return landed

    @transient_retry
    async def _matches(self, query: Doc) -> bool:
        return await self.reads.read_one(self.steps, query, {"_id": 1}) is not None

    @transient_retry
    async def _has_entry(self, query: Doc, entry: AttemptEntry) -> bool:
        where = {"_id": query["_id"], "run_id": query["run_id"]}
        doc = await self.reads.read_one(self.steps, where, {"history": 1})
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
        holder and attempt.) With targeted polling (:mod:`pikku_mongo.store.job_index`) the
        first find reads the job index instead, then 1 find of those jobs by ``_id`` and
        shard key, the claims, and 1 ``delete_many`` of the entries claimed or stale."""
        wanted = {pack(f) for f in check_strs(functions, "step function")}
        if check_int(limit, "limit") <= 0 or not wanted:
            return []
        now = utcnow()
        expires = now + timedelta(seconds=self.skew.ttl(claim_ttl, "claim_ttl"))
        claim = {
            "status": "running",
            "claim_holder": pack(check_str(holder, "claim holder")),
            "claim_expires_at": to_us(expires),
            "updated_at": to_us(now),
        }
        jobs = self.targeting.job_index
        # Targeted (pikku_mongo.store.job_index): the entries due first, then their jobs.
        entries = await jobs.due(sorted(wanted), to_us(now), limit * 4) if jobs else []
        candidates = await self._candidates(wanted, now, limit, entries)
        won: list[StepRecord] = []
        while candidates and len(won) < limit:
            # A claim lost to a rival goes to the next candidate.
            take, candidates = candidates[: limit - len(won)], candidates[limit - len(won) :]
            claimed = await asyncio.gather(*(self._claim(doc, claim) for doc in take))
            won += [step for step in claimed if step is not None]
        if jobs is not None:
            # Every entry read goes but those of jobs still claimable and not tried.
            kept = {d["_id"] for d in candidates}
            await jobs.drop([e for e in entries if e["_id"] not in kept])
        return won

    async def _candidates(
        self, wanted: set[str], now: datetime, limit: int, entries: list[Doc]
    ) -> list[Doc]:
        """The claimable jobs of the ``wanted`` functions due first: those the job index's
        ``entries`` name, with targeted polling; else a read of the claim index."""
        jobs = self.targeting.job_index
        if jobs is not None:
            found = await jobs.steps_of(entries, claim_filter(now)) if entries else []
            return sorted(found, key=lambda d: (d["due_at"], d["_id"]))
        cursor = self.steps.find(claim_filter(now)).sort([("due_at", 1)]).limit(limit * 4)
        return [d for d in await cursor.to_list() if d.get("function") in wanted]

    async def _claim(self, doc: Doc, claim: Doc) -> StepRecord | None:
        """One guarded claim of the job ``doc`` (as read): the claimed step, or None when
        a rival took it first."""
        attempts = int(doc.get("attempts", 0))
        guard = {
            "_id": doc["_id"],
            "run_id": eq(doc["run_id"]),
            "status": eq("scheduled"),
            "attempts": eq(attempts),
            "halted": eq(False),
        }

        async def confirm() -> bool:
            mine = {
                **guard,
                "claim_holder": eq(claim["claim_holder"]),
                "attempts": eq(attempts + 1),
            }
            del mine["status"], mine["halted"]
            return await self._matches(mine)

        landed = await self.step_writes.guarded(
            guard, {"$set": claim, "$inc": {"attempts": 1}}, confirm
        )
        if not landed:
            return None
        return step_from_doc({**doc, **claim, "attempts": attempts + 1})

    @transient_retry
    async def find_claims(self, holder: str) -> list[StepRecord]:
        """1 find (the claim index's (status, kind) prefix)."""
        query = {
            "status": eq("running"),
            "kind": eq("dispatch"),
            "claim_holder": eq(pack(check_str(holder, "claim holder"))),
        }
        return [step_from_doc(doc) for doc in await self.reads.read_all(self.steps, query)]

    @transient_retry
    async def requeue_lapsed_claims(self) -> int:
        """1 update_many, guarded by the lapsed claim (safe to repeat); lapsed means
        ``max_clock_skew`` past its expiry by this host's clock. With targeted polling,
        then the restoring sweeps of the job and line indexes
        (:meth:`JobIndex.restore`, :meth:`LineIndex.restore`)."""
        now = utcnow()
        result = await self.steps.update_many(
            lapsed_claims_filter(now - timedelta(microseconds=self.skew.skew_us)),
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
        # Targeted polling: requeued jobs, and any job or run in a line whose index
        # entry a dead process never wrote, get one (this is a recovery sweep).
        if self.targeting.job_index is not None:
            await self.targeting.job_index.restore(now)
        if self.targeting.line_index is not None:
            await self.targeting.line_index.restore()
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
            claim_expires_at={"$gt": to_us(now) + self.skew.skew_us},
        )
        expires = now + timedelta(seconds=self.skew.ttl(claim_ttl, "claim_ttl"))
        return await self.step_writes.guarded(query, {"$set": {"claim_expires_at": to_us(expires)}})

    @transient_retry
    async def halt_steps(self, run_id: str, halted: bool) -> None:
        """1 update (multi); with targeted polling, releasing a run's jobs also writes
        their job index entries (1 find of the run's jobs, 1 upsert each)."""
        where = {"run_id": eq(pack(check_str(run_id, "run id"))), "kind": eq("dispatch")}
        await self.steps.update_many(where, {"$set": {"halted": check_bool(halted, "halted")}})
        if not halted and self.targeting.job_index is not None:
            await self.targeting.job_index.refresh({**where, "status": eq("scheduled")})

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


def _requeues(changes: dict[str, Any]) -> bool:
    """Whether a step write may have put a queue job (back) on the queue: every such
    write (an outcome to retry later, an unclaim, ``engine.retry``) ends a claim or sets
    ``halted``, and a sleep or an inline retry does neither (so costs no read)."""
    if changes.get("status") == "scheduled":
        return "claim_holder" in changes or "halted" in changes
    return changes.get("halted") is False
