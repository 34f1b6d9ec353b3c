"""``MongoStore``'s updates (docs/guides/values-and-updates.md): the ``updates`` collection.

One document per update: ``_id`` = packed run id, ``\\x01\\x03``, packed update id (so
an update id is kept once per run by the ``_id`` alone); ``run_id`` (the shard key, in
every filter), ``name``, the payload as JSON text, the send time in microseconds, ``seq``
(the order updates are consumed in), ``consumed`` (0/1) and ``consumed_by``,
``answered`` (0/1), the answer as JSON text and its time, and an insert id that lets a
repeat after a lost reply know its own first try.

Submitting is one command where the server serves a client-level ``bulkWrite``: an
ordered command whose first write marks the run owed a pass, as an upsert guarded by the
run not having ended, and whose second inserts the update. A run that has ended makes
the guarded upsert collide on its ``_id``, which stops the command before the insert; a
run that does not exist is made by the upsert (and deleted again at once, with the
update). Elsewhere: 1 find of the update, 1 of the run, the insert, then the mark.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime
from typing import Any

from pymongo import ASCENDING, IndexModel, InsertOne, ReturnDocument, UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import DuplicateKeyError

from engine_core.records import TERMINAL, UpdateRecord, UpdateSubmission
from pikku_mongo.wire.causal import CausalReads
from pikku_mongo.wire.checks import check_datetime, check_str
from pikku_mongo.wire.documents import Doc
from pikku_mongo.wire.encoding import (
    dump_value,
    from_us,
    load_value,
    opt_from_us,
    opt_to_us,
    pack,
    pack_opt,
    to_us,
    unpack,
    unpack_opt,
)
from pikku_mongo.wire.filters import any_of, eq
from pikku_mongo.wire.retry import surface_oversize, transient_retry
from pikku_mongo.wire.shard_keys import item_filter
from pikku_mongo.wire.watch import IDLE_POLL_S, inserts, runs_changed
from pikku_mongo.writes.batcher import Batcher
from pikku_mongo.writes.queued import failure_of
from pikku_mongo.writes.riding import NotServed, client_bulk_write

UPDATE_INDEXES = [
    # consume_update, list_updates, delete_runs: a run's updates.
    IndexModel([("run_id", ASCENDING), ("seq", ASCENDING)]),
]
_AFTER = ReturnDocument.AFTER
_BY_SEQ = [("seq", ASCENDING)]
#: The consumer's own update first (consumed), then the oldest unconsumed one.
_TAKE_ORDER = [("consumed", -1), ("seq", ASCENDING)]
_ENDED = sorted(TERMINAL)
_UPDATE_INSERTS: list[Doc] = [{"$match": {"operationType": {"$eq": "insert"}}}]


def update_to_doc(update: UpdateRecord) -> Doc:
    """The document of ``update`` (its fields checked)."""
    answer = update.answer
    return {
        **item_filter(update.run_id, update.update_id, "update id"),
        "run_id": pack(update.run_id),
        "uid": pack(update.update_id),
        "name": pack(check_str(update.name, "update name")),
        "payload": dump_value(update.payload),
        "at": to_us(check_datetime(update.created_at, "created_at")),
        "seq": check_str(update.seq, "update seq"),
        "consumed": 0 if update.consumed_by is None else 1,
        "consumed_by": pack_opt(update.consumed_by),
        "answered": 0 if answer is None else 1,
        "answer": None if answer is None else dump_value(answer),
        "answered_at": opt_to_us(update.answered_at),
    }


def update_from_doc(doc: Doc) -> UpdateRecord:
    """The update a document holds."""
    return UpdateRecord(
        run_id=unpack(doc["run_id"]),
        update_id=unpack(doc["uid"]),
        name=unpack(doc["name"]),
        payload=load_value(doc.get("payload")),
        created_at=from_us(doc["at"]),
        seq=doc["seq"],
        consumed_by=unpack_opt(doc.get("consumed_by")),
        answer=load_value(doc.get("answer")),
        answered_at=opt_from_us(doc.get("answered_at")),
    )


@dataclass(eq=False)
class UpdateOps:
    """The update methods of :class:`~pikku_mongo.MongoStore`."""

    updates: AsyncCollection[Doc]
    _: KW_ONLY
    runs: AsyncCollection[Doc]
    run_writes: Batcher
    reads: CausalReads
    watch: bool
    #: Whether the server serves a client-level ``bulkWrite`` (learnt once).
    one_command: bool = field(default=True)

    async def create_update_indexes(self) -> None:
        """1 ``createIndexes``."""
        await self.updates.create_indexes(UPDATE_INDEXES)

    @surface_oversize
    async def submit_update(self, update: UpdateRecord) -> UpdateSubmission:
        """1 client-level ``bulkWrite`` (see the module docstring); a refusal is looked
        at with 1 or 2 finds."""
        doc = update_to_doc(update)
        doc["ins"] = uuid.uuid4().hex
        return await self._submit(doc)

    @transient_retry
    async def _submit(self, doc: Doc) -> UpdateSubmission:
        if self.one_command:
            try:
                return await self._submit_in_one(doc)
            except NotServed:
                self.one_command = False
        return await self._submit_apart(doc)

    async def _submit_in_one(self, doc: Doc) -> UpdateSubmission:
        run = {"_id": doc["run_id"]}
        owed = UpdateOne(
            {**run, "status": {"$nin": _ENDED}},
            {"$set": {"pending_pass": True}},
            upsert=True,
            namespace=self.runs.full_name,
        )
        insert: InsertOne[Doc] = InsertOne(doc, namespace=self.updates.full_name)
        result, errors = await client_bulk_write(self.runs, [owed, insert], ordered=True)
        for error in errors.values():
            failure = failure_of(error)
            if isinstance(failure, BaseException):
                raise failure
        applied = result.update_results.get(0) if result.has_verbose_results else None
        if 0 not in errors and applied is not None and applied.upserted_id is not None:
            # No such run: the upsert made one. Both go again.
            await self.runs.delete_many({**run, "workflow": {"$exists": False}})
            if 1 not in errors:
                await self.updates.delete_one({"_id": doc["_id"], "run_id": eq(doc["run_id"])})
                return UpdateSubmission(kept=False)
        if 0 not in errors and 1 not in errors:
            return UpdateSubmission(kept=True)
        return await self._refused(doc, run_ended=0 in errors)

    async def _submit_apart(self, doc: Doc) -> UpdateSubmission:
        if await self._find(doc) is not None:
            return await self._refused(doc, run_ended=False)
        found = await self.reads.read_one(self.runs, {"_id": doc["run_id"]}, {"status": 1})
        if found is None or found.get("status") in TERMINAL:
            return await self._refused(doc, run_ended=True)
        try:
            await self.updates.insert_one(doc)
        except DuplicateKeyError:
            return await self._refused(doc, run_ended=False)
        await self.run_writes.update({"_id": doc["run_id"]}, {"$set": {"pending_pass": True}})
        return UpdateSubmission(kept=True)

    async def _refused(self, doc: Doc, *, run_ended: bool) -> UpdateSubmission:
        """What a submission that stored nothing found: the update of that id (this
        submission's own first try counts as kept), else the run's status."""
        existing = await self._find(doc)
        if existing is not None:
            if existing.get("ins") == doc["ins"]:
                return UpdateSubmission(kept=True)
            return UpdateSubmission(kept=False, existing=update_from_doc(existing))
        status = None
        if run_ended:
            found = await self.reads.read_one(self.runs, {"_id": doc["run_id"]}, {"status": 1})
            status = None if found is None else found.get("status")
        return UpdateSubmission(kept=False, run_status=status)

    async def _find(self, doc: Doc) -> Doc | None:
        return await self.reads.read_one(
            self.updates, {"_id": doc["_id"], "run_id": eq(doc["run_id"])}
        )

    @transient_retry
    async def consume_update(self, run_id: str, name: str, consumer: str) -> UpdateRecord | None:
        """1 findAndModify: the consumer's own update sorts first, then the oldest
        unconsumed one of the name. (Retried as a whole: a repeat finds what it took.)"""
        taker = pack(check_str(consumer, "update consumer"))
        doc = await self.updates.find_one_and_update(
            {
                "run_id": eq(pack(check_str(run_id, "run id"))),
                **any_of(
                    {"consumed_by": eq(taker)},
                    {"name": eq(pack(check_str(name, "update name"))), "consumed": eq(0)},
                ),
            },
            {"$set": {"consumed": 1, "consumed_by": taker}},
            sort=_TAKE_ORDER,
            return_document=_AFTER,
        )
        return None if doc is None else update_from_doc(doc)

    @transient_retry
    async def answer_update(
        self, run_id: str, update_id: str, answer: dict[str, Any], *, answered_at: datetime
    ) -> UpdateRecord | None:
        """1 findAndModify guarded by no answer yet; when it finds none, 1 find."""
        query = item_filter(run_id, update_id, "update id")
        change = {
            "$set": {
                "answered": 1,
                "answer": dump_value(answer),
                "answered_at": to_us(check_datetime(answered_at, "answered_at")),
            }
        }
        doc = await self.updates.find_one_and_update(
            {**query, "answered": eq(0)}, change, return_document=_AFTER
        )
        if doc is None:
            doc = await self.reads.read_one(self.updates, query)
        return None if doc is None else update_from_doc(doc)

    @transient_retry
    async def get_update(self, run_id: str, update_id: str) -> UpdateRecord | None:
        """1 find by ``_id``."""
        doc = await self.reads.read_one(self.updates, item_filter(run_id, update_id, "update id"))
        return None if doc is None else update_from_doc(doc)

    @transient_retry
    async def list_updates(self, run_id: str, *, pending: bool) -> list[UpdateRecord]:
        """1 find on ``run_id`` (the index), in ``seq`` order."""
        query: Doc = {"run_id": eq(pack(check_str(run_id, "run id")))}
        if pending:
            query["answered"] = eq(0)
        docs = await self.updates.find(query).sort(_BY_SEQ).to_list()
        return [update_from_doc(doc) for doc in docs]

    def answer_hints(self) -> AsyncIterator[str] | None:
        """A change stream of the ``updates`` collection's answers (an update taken is
        no wake-up: its callers would look and find no answer; ends at once on a server
        without change streams)."""
        if not self.watch:
            return None
        changed = ["update", "replace"]
        return runs_changed(self.updates, changed, "answer change stream", holding={"answered": 1})

    def update_hints(self) -> AsyncIterator[None] | None:
        """A change stream of update inserts (ends at once on a server without change
        streams), read at most every ``IDLE_POLL_S`` where the server answers at once: it
        wakes a worker for runs of other processes' callers (a caller that drives the
        run wakes it itself), whose poll would find them a little later anyway."""
        if not self.watch:
            return None
        stream = "update change stream"
        return inserts(self.updates, _UPDATE_INSERTS, stream, None, poll_s=IDLE_POLL_S)
