"""``MongoStore``'s operations on the ``schedules`` collection.

One document per schedule, ``_id`` = the packed name (so names sort as the in-memory
store sorts them and ``list_schedules`` reads in ``_id`` order)::

    {_id, workflow, cron, every, timezone, input (JSON text), paused (0/1),
     next_fire_us, created_us, updated_us, catch_up}

Times are int64 microseconds like the rest of the store; ``paused`` is 0/1 (nx-27017
reads a boolean written with ``$set`` back as 1). Every query addresses one schedule by
``_id`` except the listing, which every serving process reads about once a second (a
fleet has few schedules). Each method says what it costs.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from datetime import datetime
from typing import Any

from pymongo import ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection

from engine_core.common.clock import utcnow
from engine_core.records import ScheduleRecord
from pikku_mongo.wire.causal import CausalReads
from pikku_mongo.wire.checks import (
    check_bool,
    check_datetime,
    check_opt_str,
    check_seconds,
    check_str,
)
from pikku_mongo.wire.documents import Doc
from pikku_mongo.wire.encoding import dump_value, from_us, load_value, pack, to_us, unpack
from pikku_mongo.wire.filters import eq
from pikku_mongo.wire.retry import transient_retry

_BY_ID = [("_id", 1)]


def _id(name: str) -> str:
    return pack(check_str(name, "schedule name"))


def schedule_to_doc(schedule: ScheduleRecord) -> Doc:
    """The document of ``schedule`` (its fields checked)."""
    every = schedule.every
    return {
        "_id": _id(schedule.name),
        "workflow": pack(check_str(schedule.workflow, "schedule workflow")),
        "cron": check_opt_str(schedule.cron, "schedule cron"),
        "every": None if every is None else check_seconds(every, "schedule every"),
        "timezone": check_str(schedule.timezone, "schedule timezone"),
        "input": dump_value(schedule.input),
        "paused": int(check_bool(schedule.paused, "schedule paused")),
        "next_fire_us": to_us(check_datetime(schedule.next_fire_at, "next_fire_at")),
        "created_us": to_us(check_datetime(schedule.created_at, "created_at")),
        "updated_us": to_us(check_datetime(schedule.updated_at, "updated_at")),
        "catch_up": check_str(schedule.catch_up, "schedule catch_up"),
    }


def schedule_from_doc(doc: Doc) -> ScheduleRecord:
    """The schedule a document holds."""
    every = doc.get("every")
    return ScheduleRecord(
        name=unpack(doc["_id"]),
        workflow=unpack(doc["workflow"]),
        cron=doc.get("cron"),
        every=None if every is None else float(every),
        timezone=doc["timezone"],
        input=load_value(doc.get("input")),
        paused=bool(doc.get("paused")),
        next_fire_at=from_us(doc["next_fire_us"]),
        created_at=from_us(doc["created_us"]),
        updated_at=from_us(doc["updated_us"]),
        catch_up=doc.get("catch_up") or "latest",
    )


@dataclass(eq=False)
class ScheduleOps:
    """The schedule methods of :class:`~pikku_mongo.MongoStore`."""

    schedules: AsyncCollection[Doc]
    _: KW_ONLY
    reads: CausalReads

    @transient_retry
    async def put_schedule(self, schedule: ScheduleRecord) -> None:
        """1 replace by ``_id``, upserting (idempotent)."""
        doc = schedule_to_doc(schedule)
        await self.schedules.replace_one({"_id": doc["_id"]}, doc, upsert=True)

    @transient_retry
    async def get_schedule(self, name: str) -> ScheduleRecord | None:
        """1 find by ``_id``."""
        doc = await self.reads.read_one(self.schedules, {"_id": _id(name)})
        return schedule_from_doc(doc) if doc is not None else None

    @transient_retry
    async def list_schedules(self) -> list[ScheduleRecord]:
        """1 find of the whole collection in ``_id`` order (plus a getMore per batch)."""
        docs = await self.schedules.find({}, sort=_BY_ID).to_list()
        return [schedule_from_doc(doc) for doc in docs]

    @transient_retry
    async def delete_schedule(self, name: str) -> bool:
        """1 delete by ``_id``."""
        result = await self.schedules.delete_one({"_id": _id(name)})
        return result.deleted_count == 1

    @transient_retry
    async def set_schedule_paused(
        self,
        name: str,
        paused: bool,
        *,
        next_fire_at: datetime | None = None,
        updated_at: datetime,
    ) -> ScheduleRecord | None:
        """1 findAndModify by ``_id`` (idempotent)."""
        changes: dict[str, Any] = {
            "paused": int(check_bool(paused, "schedule paused")),
            "updated_us": to_us(check_datetime(updated_at, "updated_at")),
        }
        if next_fire_at is not None:
            changes["next_fire_us"] = to_us(check_datetime(next_fire_at, "next_fire_at"))
        doc = await self.schedules.find_one_and_update(
            {"_id": _id(name)}, {"$set": changes}, return_document=ReturnDocument.AFTER
        )
        return schedule_from_doc(doc) if doc is not None else None

    @transient_retry
    async def advance_schedule(
        self, name: str, *, expect: datetime, next_fire_at: datetime
    ) -> bool:
        """1 update by ``_id``, guarded by ``next_fire_us`` equal to ``expect``: the
        guard and the write are one single-document write, so one caller wins."""
        result = await self.schedules.update_one(
            {
                "_id": _id(name),
                "next_fire_us": eq(to_us(check_datetime(expect, "expect"))),
            },
            {
                "$set": {
                    "next_fire_us": to_us(check_datetime(next_fire_at, "next_fire_at")),
                    "updated_us": to_us(utcnow()),
                }
            },
        )
        return result.matched_count == 1
