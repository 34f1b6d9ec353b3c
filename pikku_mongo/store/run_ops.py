"""``MongoStore``'s operations on the ``runs`` collection: the control plane of passes.

The hot path is one guarded write of the run document per step (start a step, carrying
the outcome of the one before into the run's journal), sent through the group commit
(:mod:`pikku_mongo.writes.batcher`) and addressed by ``_id``. Each method says what it costs.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

from pymongo import ReturnDocument

from engine_core.common.clock import utcnow
from engine_core.errors import DuplicateRunError
from engine_core.records import ACTIVE, TERMINAL, RunRecord, RunState, StepRecord
from pikku_mongo.store.runs_part import RunsPart
from pikku_mongo.wire.checks import (
    check_bool,
    check_datetime,
    check_int,
    check_opt_datetime,
    check_opt_str,
    check_seconds,
    check_str,
    check_strs,
)
from pikku_mongo.wire.documents import (
    Doc,
    expiry_fields,
    inflight_entry,
    inflight_field,
    run_from_doc,
    run_to_doc,
)
from pikku_mongo.wire.encoding import dump_value, pack, to_us, unpack
from pikku_mongo.wire.filters import eq
from pikku_mongo.wire.flow_fields import ENDED_UNSET
from pikku_mongo.wire.journal_text import RecentTexts
from pikku_mongo.wire.retry import surface_oversize, transient_retry
from pikku_mongo.writes.journal_pages import beside_writes
from pikku_mongo.writes.journal_writes import BESIDE_AT, RunUpdate
from pikku_mongo.writes.op_ids import PassOps, modify_recognised, pushed_op

_BY_ID = [("_id", 1)]
#: Least recently updated first. Not tie-broken by ``_id``: that would defeat the
#: ([pending_pass,] status, updated_at) indexes (and a compound index naming ``_id``
#: breaks nx-27017); the order among equal times promises nothing.
_LEAST_RECENT = [("updated_at", 1)]


def _id(run_id: str) -> str:
    return pack(check_str(run_id, "run id"))


@dataclass(eq=False, kw_only=True)
class RunOps(RunsPart):
    """The run methods of :class:`~pikku_mongo.MongoStore`."""

    #: See :meth:`journals_outcomes` (tests set 1 to send every outcome beside).
    beside_at: int = field(default=BESIDE_AT, init=False)
    #: The operation ids of this process's passes (see :mod:`pikku_mongo.writes.op_ids`).
    pass_ops: PassOps = field(default_factory=PassOps, init=False)
    recent_texts: RecentTexts = field(default_factory=RecentTexts, init=False)

    # ---- creating and reading ---------------------------------------------------

    @transient_retry
    async def insert_run(self, run: RunRecord) -> RunRecord | None:
        """1 insert (group-committed); on a duplicate id, 1 find. With a dedup id, the
        claim first (1 insert when free; see :mod:`pikku_mongo.store.dedup_ops`); in a
        fair line, its turn first (2 commands: :meth:`KeyOps.take_turn
        <pikku_mongo.store.key_ops.KeyOps.take_turn>`). The document
        carries an insert id, so an insert repeated after a lost reply knows it was its
        own."""
        run = await self.lined_up(run)
        doc = run_to_doc(run)
        doc["ins"] = nonce = uuid.uuid4().hex
        if "dedup" in doc:
            holder = await self.dedup.claim(doc["dedup"], doc["_id"])
            if holder is not None:
                raise DuplicateRunError(
                    f"run {holder!r} holds dedup id {run.dedup_id!r}"
                    + (f" on queue {run.queue!r}" if run.queue else "")
                    + " and has not ended",
                    run_id=holder,
                )
        while True:
            if await self.run_writes.insert(doc):
                await self._lined(doc)
                return None
            existing = await self.reads.read_one(self.runs, {"_id": doc["_id"]})
            if existing is not None:
                if existing.get("ins") == nonce:
                    await self._lined(doc)
                    return None
                if "dedup" in doc and existing.get("dedup") != doc["dedup"]:
                    # The id was taken by a run that does not hold this dedup id.
                    await self.dedup.release(doc["dedup"], doc["_id"])
                return run_from_doc(existing)
            # Deleted between the commands: insert again.

    async def _lined(self, doc: Doc) -> None:
        """With targeted polling, a run inserted in its queue's line gets its line index
        entry once the run is there (see :mod:`pikku_mongo.store.line_index`)."""
        if self.targeting.line_index is not None and "line" in doc:
            await self.targeting.line_index.add([doc])

    @transient_retry
    async def get_run(self, run_id: str) -> RunRecord | None:
        """1 find."""
        doc = await self.reads.read_one(self.runs, {"_id": _id(run_id)})
        return run_from_doc(doc) if doc is not None else None

    @transient_retry
    async def get_runs(
        self, run_ids: Sequence[str], *, status_in: Sequence[str] | None = None
    ) -> list[RunRecord]:
        """1 find by ``_id`` (``$in``)."""
        ids = [_id(r) for r in run_ids]
        if not ids:
            return []
        query: Doc = {"_id": {"$in": ids}}
        if status_in is not None:
            query["status"] = {"$in": check_strs(status_in, "run status")}
        return [run_from_doc(doc) for doc in await self.reads.read_all(self.runs, query)]

    # ---- passes -----------------------------------------------------------------

    @transient_retry
    async def begin_pass(
        self,
        run_id: str,
        *,
        holder: str,
        ttl: float,
        held: int | None = None,
        workflows: Sequence[str] | None = None,
    ) -> RunRecord | None:
        """1 findAndModify, guarded by the lease's expiry (or by ``held``). (A repeat after
        a lost reply finds the lease held by its own first try and returns None: the
        pass begins again once that lease lapses.)"""
        now = utcnow()
        expires = now + timedelta(seconds=self.skew.ttl(ttl, "lease ttl"))
        query: Doc = {"_id": _id(run_id)}
        if held is None:
            # Free, or lapsed ``max_clock_skew`` ago by this host's clock.
            query["lease_us"] = {"$lte": to_us(now) - self.skew.skew_us}
        else:
            query["token"] = check_int(held, "held token")
        if workflows is not None:
            query["workflow"] = {"$in": [pack(w) for w in check_strs(workflows, "workflow")]}
        doc = await self.runs.find_one_and_update(
            query,
            {
                "$inc": {"token": 1, "passes": 1},
                "$set": {
                    "pending_pass": False,
                    "open_pass": True,
                    "lease_us": to_us(expires),
                    "holder": pack(check_str(holder, "lease holder")),
                    "changed": {},
                },
            },
            return_document=ReturnDocument.BEFORE,
        )
        if doc is None:
            return None
        run = run_from_doc(doc)  # ``changed`` as it was; the rest as the write left it
        run.token += 1
        run.passes += 1
        run.pending_pass = False
        run.open_pass = True
        run.lease_holder = holder
        run.lease_expires_at = expires
        return run

    async def extend_pass(self, run_id: str, *, token: int, ttl: float) -> bool:
        """1 update (group-committed), guarded by token."""
        expires = utcnow() + timedelta(seconds=check_seconds(ttl, "lease ttl"))
        return await self.run_writes.guarded(
            {"_id": _id(run_id), "token": check_int(token, "token")},
            {"$set": {"lease_us": to_us(expires)}},
        )

    async def release_pass(self, run_id: str, *, token: int) -> None:
        """1 update (group-committed), guarded by token."""
        await self.run_writes.update(
            {"_id": _id(run_id), "token": check_int(token, "token")}, {"$set": {"lease_us": 0}}
        )

    @surface_oversize
    async def start_step(
        self,
        run_id: str,
        *,
        token: int,
        status: RunState,
        key: str,
        attempt: int,
        started_at: datetime,
        done: Iterable[str] = (),
        outcomes: Sequence[StepRecord] = (),
        forget: Iterable[str] = (),
        order: int | None = None,
        group: int | None = None,
    ) -> bool:
        """1 update (group-committed), guarded by status and token."""
        key = check_str(key, "step key")
        to_set: Doc = {
            f"inflight.{inflight_field(key)}": inflight_entry(
                key,
                check_int(attempt, "attempt"),
                check_datetime(started_at, "started_at"),
                order=order,
                group=group,
            ),
        }
        return await self._pass_write(
            run_id,
            token=token,
            status=status,
            started=key,
            fields=to_set,
            done=done,
            outcomes=outcomes,
            forget=forget,
        )

    @surface_oversize
    async def record_steps(
        self,
        run_id: str,
        *,
        token: int,
        status: RunState,
        outcomes: Sequence[StepRecord],
        done: Iterable[str] = (),
        forget: Iterable[str] = (),
    ) -> bool:
        """1 update (group-committed), guarded by status and token."""
        return await self._pass_write(
            run_id,
            token=token,
            status=status,
            started=None,
            fields={},
            done=done,
            outcomes=outcomes,
            forget=forget,
        )

    async def _pass_write(
        self,
        run_id: str,
        *,
        token: int,
        status: RunState,
        started: str | None,
        fields: Doc,
        done: Iterable[str],
        outcomes: Sequence[StepRecord],
        forget: Iterable[str],
    ) -> bool:
        """The guarded write of a pass at a step boundary: ``fields`` (the step
        ``started``, if any), the in-flight marks of ``done`` cleared, ``outcomes``
        journaled or written beside the run (:meth:`journals_outcomes`), and the
        journal entries of ``forget`` dropped."""
        query = {
            "_id": _id(run_id),
            "status": check_str(status, "run status"),
            "token": check_int(token, "token"),
        }
        forget = tuple(forget)  # read twice below
        cleared = {check_str(d, "finished step key") for d in done} - {started}
        base = RunUpdate(
            {**fields, "open_pass": True, "updated_at": to_us(utcnow())},
            {f"inflight.{inflight_field(d)}": "" for d in cleared},
        )
        texts = [self.recent_texts.text(outcome) for outcome in outcomes]
        # Landed, but the run taken over since (a newer pass's writes reuse the ring's
        # slots): the pass is fenced out as if it had not, so it starts no step body for
        # an attempt the newer pass has already counted lost.
        if self.journals_outcomes(outcomes):
            update = base.with_journal(outcomes, forget, texts)
            return await self._guarded(query, update, still=("token",))
        # The outcomes go to their step documents or a journal page in the same command,
        # only if this write lands (pikku_mongo.writes.riding); the journal form is kept
        # for a server found out to serve no such command on this write.
        return await self._guarded(
            query,
            base.with_journal((), forget),
            still=("token",),
            beside=beside_writes(run_id, outcomes, texts),
            fallback=base.with_journal(outcomes, forget, texts),
        )

    def journals_outcomes(self, outcomes: Sequence[StepRecord]) -> bool:
        """Whether ``start_step`` and ``record_steps`` put ``outcomes`` in the run's
        journal: unless the server serves client-level ``bulkWrite`` and they are at
        least :attr:`beside_at` (``BESIDE_AT``), when they go to their step records in
        the same command."""
        return not (outcomes and len(outcomes) >= self.beside_at and self.run_writes.beside_served)

    async def _guarded(
        self,
        query: Doc,
        update: RunUpdate,
        *,
        still: Sequence[str] = (),
        beside: Sequence[tuple[Doc, Doc]] = (),
        fallback: RunUpdate | None = None,
    ) -> bool:
        """A guarded write of a pass (``query`` holds its token) that knows, when it is
        sent again after a lost reply and finds its guard failed, whether its first try
        landed: it carries an operation id (see :mod:`pikku_mongo.writes.op_ids`), in
        the pass's ring when ``still`` holds the token, else pushed onto the run's
        ``ops`` (a later pass's writes reuse the ring's slots).
        ``still``: fields of the guard that must hold yet for a landed first try to
        count. ``beside`` and ``fallback``: see :meth:`Batcher.guarded`."""
        doc_id = query["_id"]
        mark = self.pass_ops.add(doc_id, query["token"]) if "token" in still else pushed_op(doc_id)
        mine = {**mark.found, **{f: query[f] for f in still}}

        async def landed() -> bool:
            doc = await self.reads.read_one(self.runs, mine, {"_id": 1})
            return doc is not None

        return await self.run_writes.guarded(
            query,
            mark.on(update.document()),
            landed,
            beside=beside,
            fallback=None if fallback is None else mark.on(fallback.document()),
        )

    @surface_oversize
    async def settle_run(
        self,
        run_id: str,
        *,
        token: int,
        expect: Sequence[RunState],
        status: RunState | None = None,
        output: Any = None,
        error: dict[str, Any] | None = None,
        outcomes: Sequence[StepRecord] = (),
        forget: Iterable[str] = (),
        idle_only: bool = False,
        keep_lease: bool = False,
        expire_at: datetime | None = None,
    ) -> bool:
        """1 update (group-committed), guarded by token and status (and ``pending_pass``
        with ``idle_only``)."""
        to_set: Doc = {"inflight": {}, "open_pass": False, "updated_at": to_us(utcnow())}
        if not check_bool(keep_lease, "keep_lease"):
            to_set["lease_us"] = 0
        to_unset: Doc = {}
        if status is not None:
            to_set["status"] = check_str(status, "run status")
            to_set["output"] = dump_value(output)
            to_set["error"] = dump_value(error)
            if status in TERMINAL:
                to_unset.update(ENDED_UNSET)
                to_set.update(expiry_fields(check_opt_datetime(expire_at, "expire_at")))
        update = RunUpdate(to_set, to_unset).with_journal(outcomes, forget)
        query: Doc = {
            "_id": _id(run_id),
            "token": check_int(token, "token"),
            "status": {"$in": check_strs(expect, "expected run status")},
        }
        if check_bool(idle_only, "idle_only"):
            query["pending_pass"] = False
        if not keep_lease:
            self.pass_ops.forget(query["_id"], token)
        # A settle that landed must be recognised after another process has taken the
        # run over (its lease is free then): its id goes onto ``ops``, not the ring.
        return await self._guarded(query, update)

    async def request_pass(self, run_id: str, *, changed: str | None = None) -> None:
        """1 update (group-committed)."""
        to_set: Doc = {"pending_pass": True}
        if check_opt_str(changed, "changed step key") is not None:
            key = cast(str, changed)
            to_set[f"changed.{inflight_field(key)}"] = pack(key)
        await self.run_writes.update({"_id": _id(run_id)}, {"$set": to_set})

    @transient_retry
    async def request_passes(self, run_ids: Sequence[str]) -> None:
        """1 update_many by ``_id`` per 1,000 runs (cheaper per run than a bulk of
        single updates on nx-27017)."""
        ids = [_id(r) for r in run_ids]
        for at in range(0, len(ids), 1000):
            await self.runs.update_many(
                {"_id": {"$in": ids[at : at + 1000]}}, {"$set": {"pending_pass": True}}
            )

    async def set_run_status(
        self,
        run_id: str,
        status: RunState,
        *,
        expect: Sequence[RunState],
        error: dict[str, Any] | None = None,
        request_pass: bool = False,
        forget: Iterable[str] = (),
        expire_at: datetime | None = None,
    ) -> RunRecord | None:
        """1 findAndModify, guarded by status. Sent again after a lost reply, it first
        reads the run: its operation id there means the first try landed (a cancel whose
        reply was lost still halts the run's steps and cancels its children)."""
        to_set: Doc = {
            "status": check_str(status, "run status"),
            "updated_at": to_us(utcnow()),
            # A stop or a restart: a pass remembering the steps reads them all again.
            f"changed.{inflight_field('*')}": "*",
        }
        if error is not None:
            to_set["error"] = dump_value(error)
        if request_pass:
            to_set["pending_pass"] = True
        to_unset: Doc = {}
        if status in TERMINAL:
            to_unset.update(ENDED_UNSET)
            to_set.update(expiry_fields(check_opt_datetime(expire_at, "expire_at")))
        elif status != "queued":
            to_unset.update(line="", not_before_us="")
        query = {"_id": _id(run_id), "status": {"$in": check_strs(expect, "expected run status")}}
        mark = pushed_op(_id(run_id))
        update = mark.on(RunUpdate(to_set, to_unset).with_journal((), forget).document())
        doc = await modify_recognised(self.runs, query, update, mark, reads=self.reads)
        return run_from_doc(doc) if doc is not None else None

    # ---- finding runs -----------------------------------------------------------

    @transient_retry
    async def list_child_runs(self, run_id: str) -> list[RunRecord]:
        """1 find (plus a getMore per further batch)."""
        cursor = self.runs.find({"parent_run_id": eq(_id(run_id))})
        return [run_from_doc(doc) for doc in await cursor.sort(_BY_ID).to_list()]

    @transient_retry
    async def find_runs_needing_pass(self, workflows: Sequence[str], limit: int) -> list[str]:
        """1 find per active status (equalities on the (pending_pass, status, updated_at)
        index, least recently updated first); the workflows are sorted out here."""
        wanted = {pack(w) for w in check_strs(workflows, "workflow")}
        if check_int(limit, "limit") <= 0 or not wanted:
            return []
        found: list[Doc] = []
        for status in ACTIVE:
            cursor = self.runs.find(
                {"pending_pass": eq(True), "status": eq(status)},
                {"_id": 1, "workflow": 1, "updated_at": 1},
            )
            docs = await cursor.sort(_LEAST_RECENT).limit(limit * 2).to_list()
            found += [d for d in docs if d.get("workflow") in wanted]
        found.sort(key=lambda d: d.get("updated_at", 0))
        return [unpack(d["_id"]) for d in found[:limit]]

    @transient_retry
    async def find_idle_runs(
        self, before: datetime, limit: int, *, in_flight_only: bool = False
    ) -> list[RunRecord]:
        """1 find per active status (the (status, updated_at) index)."""
        if check_int(limit, "limit") <= 0:
            return []
        found: list[Doc] = []
        for status in ACTIVE:
            query: Doc = {
                "status": eq(status),
                "updated_at": {"$lt": to_us(check_datetime(before, "before"))},
            }
            if check_bool(in_flight_only, "in_flight_only"):
                query["open_pass"] = eq(True)
            found += await self.runs.find(query).sort(_LEAST_RECENT).limit(limit).to_list()
        found.sort(key=lambda d: d.get("updated_at", 0))
        return [run_from_doc(doc) for doc in found[:limit]]
