"""``MongoStore``'s events: the ``events`` collection, ``_id`` = event id (sortable by
send time), consumed oldest first by name."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass

from pymongo import ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import DuplicateKeyError

from engine_core.records import EventRecord
from pikku_mongo.wire.causal import CausalReads
from pikku_mongo.wire.checks import check_str
from pikku_mongo.wire.documents import Doc
from pikku_mongo.wire.encoding import pack
from pikku_mongo.wire.event_docs import event_from_doc, event_to_doc
from pikku_mongo.wire.filters import eq
from pikku_mongo.wire.retry import transient_retry

_AFTER = ReturnDocument.AFTER
_BY_ID = [("_id", 1)]


@dataclass(eq=False)
class EventOps:
    """The event methods of :class:`~pikku_mongo.MongoStore`."""

    events: AsyncCollection[Doc]
    _: KW_ONLY
    reads: CausalReads

    @transient_retry
    async def insert_event(self, event: EventRecord) -> None:
        """1 insert. Event ids are unique: inserting one again (a retry whose first
        reply was lost) is a no-op."""
        try:
            await self.events.insert_one(event_to_doc(event))
        except DuplicateKeyError:
            pass

    @transient_retry
    async def consume_event(self, run_id: str, name: str, consumer: str) -> EventRecord | None:
        """1 find; when the consumer took none yet, 1 findAndModify of the oldest
        unconsumed event. (Retried as a whole: a repeat finds what it took.)"""
        run = pack(check_str(run_id, "run id"))
        taker = pack(check_str(consumer, "event consumer"))
        async with self.reads.causal() as session:
            mine = await self.events.find_one(
                {"run_id": eq(run), "consumed_by": eq(taker)}, sort=_BY_ID, session=session
            )
        if mine is not None:
            return event_from_doc(mine)
        doc = await self.events.find_one_and_update(
            {
                "run_id": eq(run),
                "name": eq(pack(check_str(name, "event name"))),
                "consumed": eq(False),
            },
            {"$set": {"consumed": True, "consumed_by": taker}},
            sort=_BY_ID,
            return_document=_AFTER,
        )
        return event_from_doc(doc) if doc is not None else None
