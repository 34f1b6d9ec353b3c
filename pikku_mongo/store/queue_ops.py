"""``MongoStore``'s flow-control operations: queue state, the line, delays, deadlines.

A queue's state is one document of the ``queues`` collection, replaced by
compare-and-set on its ``version``, of bounded size (no list of admitted runs, no time
per admission). A run's place in its queue's line, among its queue's admitted runs
(``qheld``), its delay and its deadline are fields of the run document that exist only
while they mean something (see :func:`pikku_mongo.wire.documents.flow_fields`), each with a
sparse single-field index, so every query here reads a range of one index: the head of
a line of any length, the admitted runs of a queue or of one key, the delays and
deadlines due, in time order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from dataclasses import fields as dataclass_fields
from datetime import datetime, timedelta
from typing import Any, cast

from pymongo import UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import DuplicateKeyError

from engine_core.common.clock import utcnow
from engine_core.errors import DuplicateRunError
from engine_core.records import LinePage, QueueState, RunRecord, RunState
from pikku_mongo.store.runs_part import RunsPart
from pikku_mongo.wire.checks import check_datetime, check_int, check_opt_str, check_str, check_strs
from pikku_mongo.wire.documents import EXPIRY_UNSET, Doc, inflight_field, run_from_doc
from pikku_mongo.wire.encoding import from_us, pack, to_us, unpack, unpack_opt
from pikku_mongo.wire.filters import eq
from pikku_mongo.wire.flow_fields import flow_fields, held_key, line_bounds, line_key
from pikku_mongo.wire.retry import transient_retry
from pikku_mongo.writes.journal_writes import RunUpdate
from pikku_mongo.writes.op_ids import modify_recognised, pushed_op

#: What reading a line needs of a run: all an admitter needs to begin its first pass
#: (a queued run has no journal, steps in flight or output yet).
_LINE_FIELDS = {"journal": 0, "inflight": 0, "output": 0, "error": 0}
#: The run's fields that exist only while they mean something (a run reentering its
#: queue drops those its new state does not set; see ``flow_fields``).
_FLOW_FIELDS = (
    "not_before_us", "line", "qheld", "deadline", "deadline_s", "deadline_due", "qturn",
)  # fmt: skip


def _queue_id(name: str) -> str:
    return pack(check_str(name, "queue name"))


def _state_to_doc(state: QueueState) -> Doc:
    doc: Doc = {
        "version": check_int(state.version, "queue version"),
        "held": check_int(state.held, "held slots"),
        "reserved": [pack(check_str(run_id, "run id")) for run_id in state.reserved],
        "window": [
            [to_us(check_datetime(t, "admission time")), check_int(n, "admissions")]
            for t, n in state.window
        ],
        "minutes": [[int(m), int(n)] for m, n in state.minutes],
    }
    if state.turn:
        doc["turn"] = check_int(state.turn, "turn")
    if state.key_unsaved:
        doc["kunsaved"] = [
            [None if key is None else pack(key), to_us(t), int(n), int(version)]
            for key, t, n, version in state.key_unsaved
        ]
    if state.legacy:
        doc["holders"] = [
            [pack(check_str(run_id, "run id")), None if key is None else pack(key)]
            for run_id, key in state.legacy.items()
        ]
    return doc


def _state_from_doc(name: str, doc: Doc) -> QueueState:
    window = [(from_us(t), int(n)) for t, n in cast(list[Any], doc.get("window") or [])]
    # An earlier version kept one time per admission (``recent``) and every admitted run
    # (``holders``); both are read as they were meant.
    window += [(from_us(t), 1) for t in cast(list[Any], doc.get("recent") or [])]
    return QueueState(
        name=name,
        version=int(doc.get("version", 0)),
        held=int(doc.get("held", 0)),
        reserved=[unpack(r) for r in cast(list[Any], doc.get("reserved") or [])],
        window=sorted(window),
        minutes=[(int(m), int(n)) for m, n in cast(list[Any], doc.get("minutes") or [])],
        legacy={unpack(r): unpack_opt(k) for r, k in cast(list[Any], doc.get("holders") or [])},
        turn=int(doc.get("turn", 0)),
        key_unsaved=[
            (unpack_opt(k), from_us(t), int(n), int(v))
            for k, t, n, v in cast(list[Any], doc.get("kunsaved") or [])
        ],
    )


def _held_field(run: RunRecord) -> Doc:
    """``qheld`` for a run being admitted (see :func:`~pikku_mongo.wire.documents.held_key`)."""
    if run.queue is None:
        return {}
    return {"qheld": held_key(check_str(run.queue, "queue name"), run.queue_key)}


@dataclass(eq=False, kw_only=True)
class QueueOps(RunsPart):
    """The flow-control methods of :class:`~pikku_mongo.MongoStore`."""

    queues: AsyncCollection[Doc]

    @classmethod
    def beside(cls, part: RunsPart, *, queues: AsyncCollection[Doc]) -> QueueOps:
        """Flow control on the runs ``part`` writes (sharing its collection, group
        commit, dedup claims, targeting, reads and bound), the queues' states in
        ``queues``."""
        shared = {f.name: getattr(part, f.name) for f in dataclass_fields(RunsPart)}
        return cls(queues=queues, **shared)

    @transient_retry
    async def get_queue_state(self, name: str) -> QueueState | None:
        """1 find by ``_id``."""
        doc = await self.reads.read_one(self.queues, {"_id": _queue_id(name)})
        return _state_from_doc(name, doc) if doc is not None else None

    @transient_retry
    async def save_queue_state(self, state: QueueState, *, expect_version: int) -> bool:
        """1 insert (the first state) or 1 update guarded by ``version``. Repeated after a
        lost reply it finds the version moved on and says False: the caller reads again
        and finds its own write (an admitter then moves the runs it reserved)."""
        doc = _state_to_doc(state)
        queue_id = _queue_id(state.name)
        if check_int(expect_version, "expected version") == 0:
            try:
                await self.queues.insert_one({"_id": queue_id, **doc})
            except DuplicateKeyError:
                return False
            return True
        # The fields of an earlier version: ``recent`` is read into ``window``, and
        # ``holders`` stay only while ``legacy`` has runs.
        update: Doc = {"$set": doc, "$unset": {"recent": ""}}
        for name in ("holders", "turn", "kunsaved"):
            if name not in doc:
                update["$unset"][name] = ""
        result = await self.queues.update_one(
            {"_id": queue_id, "version": eq(expect_version)}, update
        )
        return result.matched_count == 1

    @transient_retry
    async def queued_runs(
        self, queue: str, *, limit: int, after: LinePage | None = None
    ) -> list[RunRecord]:
        """1 find over a range of the ``line`` index (with targeted polling, of the line
        index: :meth:`LineIndex.head`)."""
        if check_int(limit, "limit") <= 0:
            return []
        low, high = line_bounds(check_str(queue, "queue name"))
        bounds: Doc = {"$gte": low, "$lt": high}
        if after is not None:
            bounds = {
                "$gt": line_key(
                    queue,
                    check_int(after.priority, "priority"),
                    check_datetime(after.created_at, "created_at"),
                    check_str(after.run_id, "run id"),
                    after.turn,
                ),
                "$lt": high,
            }
        if self.targeting.line_index is not None:  # targeted: see pikku_mongo.store.line_index
            head = await self.targeting.line_index.head(bounds, limit, _LINE_FIELDS)
            return [run_from_doc(doc) for doc in head]
        cursor = self.runs.find({"line": bounds}, _LINE_FIELDS).sort([("line", 1)]).limit(limit)
        return [run_from_doc(doc) for doc in await cursor.to_list()]

    @transient_retry
    async def admit_runs(self, runs: Sequence[RunRecord]) -> int:
        """1 unordered bulk of updates by ``_id``, each guarded by its run still waiting
        in its line (each sets its own ``qheld``)."""
        unique = {r.run_id: r for r in runs}.values()
        if not unique:
            return 0
        now = to_us(utcnow())
        ops = [
            UpdateOne(
                {
                    "_id": pack(check_str(run.run_id, "run id")),
                    "status": eq("queued"),
                    "line": {"$exists": True},
                },
                {
                    "$set": {
                        "status": "running",
                        "pending_pass": True,
                        "updated_at": now,
                        **_held_field(run),
                    },
                    "$unset": {"line": ""},
                },
            )
            for run in unique
        ]
        result = await self.runs.bulk_write(ops, ordered=False)
        if self.targeting.line_index is not None:
            self.targeting.line_index.admitted(pack(run.run_id) for run in unique)
        return result.modified_count

    @transient_retry
    async def count_admitted(self, queue: str) -> int:
        """1 ``count`` over a range of the ``qheld`` index. (The ``count`` command, not
        ``count_documents``: nx-27017 answers the aggregate behind the latter by a scan,
        1.6 s beside 60,000 runs where ``count`` takes 8 ms. On a sharded cluster
        ``count`` may also count orphans: more, never fewer.)"""
        low, high = line_bounds(check_str(queue, "queue name"))
        command: Doc = {"count": self.runs.name, "query": {"qheld": {"$gte": low, "$lt": high}}}
        concern = self.runs.read_concern.document
        if concern:
            command["readConcern"] = concern
        reply = await self.runs.database.command(command)
        return int(reply["n"])

    @transient_retry
    async def count_admitted_keys(
        self, queue: str, keys: Sequence[str | None]
    ) -> dict[str | None, int]:
        """1 aggregate over the ``qheld`` index: the admitted runs of these keys only."""
        check_str(queue, "queue name")
        wanted = {held_key(queue, check_opt_str(k, "queue key")): k for k in keys}
        if not wanted:
            return {}
        pipeline: list[Doc] = [
            {"$match": {"qheld": {"$in": list(wanted)}}},
            {"$group": {"_id": "$qheld", "n": {"$sum": 1}}},
        ]
        cursor = await self.runs.aggregate(pipeline)
        return {wanted[doc["_id"]]: int(doc["n"]) for doc in await cursor.to_list()}

    async def admit_run_holding(
        self, run: RunRecord, *, holder: str, ttl: float
    ) -> RunRecord | None:
        """1 update (group-committed: the runs a round admits share one bulk), guarded
        by the run still in its line with the token it was read with; it carries an
        operation id, so a repeat after a lost reply knows its first try landed."""
        now = utcnow()
        expires = now + timedelta(seconds=self.skew.ttl(ttl, "lease ttl"))
        query: Doc = {
            "_id": pack(check_str(run.run_id, "run id")),
            "status": eq("queued"),
            "token": eq(check_int(run.token, "token")),
            "line": {"$exists": True},
        }
        update: Doc = {
            "$set": {
                "status": "running",
                "pending_pass": False,
                "open_pass": True,
                "lease_us": to_us(expires),
                "holder": pack(check_str(holder, "lease holder")),
                "changed": {},
                "updated_at": to_us(now),
                **_held_field(run),
            },
            "$inc": {"token": 1, "passes": 1},
            "$unset": {"line": ""},
        }
        mark = pushed_op(query["_id"])

        async def landed() -> bool:  # sent again after a lost reply: did the first land?
            return await self.reads.read_one(self.runs, mark.found) is not None

        if not await self.run_writes.guarded(query, mark.on(update), landed):
            return None
        if self.targeting.line_index is not None:
            self.targeting.line_index.admitted([query["_id"]])
        return replace(
            run,
            status="running",
            token=run.token + 1,
            passes=run.passes + 1,
            pending_pass=False,
            open_pass=True,
            lease_holder=holder,
            lease_expires_at=expires,
            changed=[],
            updated_at=now,
        )

    @transient_retry
    async def find_delayed_runs(self, before: datetime, limit: int) -> list[RunRecord]:
        """1 find over a range of the ``not_before_us`` index."""
        if check_int(limit, "limit") <= 0:
            return []
        query = {"not_before_us": {"$lt": to_us(check_datetime(before, "before"))}}
        cursor = self.runs.find(query, _LINE_FIELDS).sort([("not_before_us", 1)]).limit(limit)
        return [run_from_doc(doc) for doc in await cursor.to_list()]

    async def release_delayed_runs(self, runs: Sequence[RunRecord]) -> list[RunRecord]:
        """1 update per run, group-committed (the runs of one sweep share a bulk), each
        guarded by its run still waiting out the delay it was read with (a debounced
        start may have moved it): each write learns on its own whether it released its
        run. A run joining a fair line takes its turn first, and a debounced run
        released ends its window (2 commands each)."""
        unique = {r.run_id: r for r in runs}.values()
        released = await asyncio.gather(*(self._release(run) for run in unique))
        return [run for run in released if run is not None]

    async def _release(self, run: RunRecord) -> RunRecord | None:
        after = await self.lined_up(replace(run, not_before=None))
        update: Doc
        if run.queue is not None:
            line = line_key(run.queue, run.priority, run.created_at, run.run_id, after.queue_turn)
            update = {"$set": {"line": line}, "$unset": {"not_before_us": ""}}
            if after.queue_turn is not None:
                update["$set"]["qturn"] = after.queue_turn
        else:
            after.status = "running"
            after.pending_pass = True
            update = {
                "$set": {"status": "running", "pending_pass": True, "updated_at": to_us(utcnow())},
                "$unset": {"not_before_us": ""},
            }
        waiting: Doc = {"$exists": True}
        if run.not_before is not None:
            waiting = eq(to_us(check_datetime(run.not_before, "not_before")))
        guard = {"_id": pack(check_str(run.run_id, "run id")), "status": eq("queued"),
                 "not_before_us": waiting}  # fmt: skip
        if not await self.run_writes.guarded(guard, update):
            return None
        if self.targeting.line_index is not None and "line" in update["$set"]:
            await self.targeting.line_index.add([{"_id": guard["_id"], **update["$set"]}])
        await self.keys.end_window(run)
        return after

    async def reenter_run(
        self, run: RunRecord, *, expect: Sequence[RunState], forget: Iterable[str] = ()
    ) -> RunRecord | None:
        """With a dedup id, its claim first (see :mod:`pikku_mongo.store.dedup_ops`): while
        another live run holds it, nothing is written. Then 1 findAndModify, guarded by
        status. Sent again after a lost reply, it first looks for its operation id, as
        ``set_run_status`` does."""
        run = await self.lined_up(run)
        fields = flow_fields(run)
        to_set: Doc = {
            **fields,
            "status": check_str(run.status, "run status"),
            "pending_pass": bool(run.pending_pass),
            "updated_at": to_us(utcnow()),
            f"changed.{inflight_field('*')}": "*",
        }
        to_unset: Doc = {name: "" for name in _FLOW_FIELDS if name not in fields}
        to_unset.update(EXPIRY_UNSET)
        query = {
            "_id": pack(check_str(run.run_id, "run id")),
            "status": {"$in": check_strs(expect, "expected run status")},
        }
        mark = pushed_op(pack(run.run_id))
        update = mark.on(RunUpdate(to_set, to_unset).with_journal((), forget).document())
        if run.dedup_id is not None:
            holder = await self.dedup.claim(fields["dedup"], pack(run.run_id))
            if holder is not None:
                raise DuplicateRunError(
                    f"run {holder!r} holds dedup id {run.dedup_id!r}"
                    + (f" on queue {run.queue!r}" if run.queue else "")
                    + f" and has not ended, so run {run.run_id!r} cannot take it again",
                    run_id=holder,
                )
        doc = await modify_recognised(self.runs, query, update, mark, reads=self.reads)
        if doc is not None and run.expire_at is not None:
            # Live again: what it owns may carry TTL stamps (pikku_mongo.store.prune_ops).
            await self.owned.stamp({pack(run.run_id): None})
        lines = self.targeting.line_index
        if doc is not None and lines is not None:
            await lines.add([doc])  # back in its line: see pikku_mongo.store.line_index
        return run_from_doc(doc) if doc is not None else None

    @transient_retry
    async def find_deadlines(self, before: datetime, limit: int) -> list[RunRecord]:
        """1 find over a range of the ``deadline_due`` index."""
        if check_int(limit, "limit") <= 0:
            return []
        query = {"deadline_due": {"$lt": to_us(check_datetime(before, "before"))}}
        cursor = self.runs.find(query, _LINE_FIELDS).sort([("deadline_due", 1)]).limit(limit)
        return [run_from_doc(doc) for doc in await cursor.to_list()]

    @transient_retry
    async def count_queue(self, queue: str) -> dict[str, int]:
        """1 aggregate over the ``qlive`` index: the runs of the queue not yet ended."""
        pipeline: list[Doc] = [
            {"$match": {"qlive": eq(pack(check_str(queue, "queue name")))}},
            {"$group": {"_id": "$status", "n": {"$sum": 1}}},
        ]
        cursor = await self.runs.aggregate(pipeline)
        return {cast(str, doc["_id"]): int(doc["n"]) for doc in await cursor.to_list()}

    @transient_retry
    async def count_waiting_keys(self, queue: str) -> dict[str | None, int]:
        """1 aggregate over the queue's range of the ``line`` index."""
        low, high = line_bounds(check_str(queue, "queue name"))
        pipeline: list[Doc] = [
            {"$match": {"line": {"$gte": low, "$lt": high}}},
            {"$group": {"_id": "$qkey", "n": {"$sum": 1}}},
        ]
        cursor = await self.runs.aggregate(pipeline)
        return {unpack_opt(doc["_id"]): int(doc["n"]) for doc in await cursor.to_list()}

    @transient_retry
    async def queue_names(self) -> list[str]:
        """1 distinct over the ``qlive`` index and 1 find of the queue states' ids."""
        live = await self.runs.distinct("qlive")
        states = await self.queues.find({}, {"_id": 1}).to_list()
        names = {n for n in live if isinstance(n, str)} | {d["_id"] for d in states}
        return sorted(unpack(n) for n in names)
