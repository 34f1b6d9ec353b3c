"""The documents of events and leases (see :mod:`pikku_mongo.wire.documents` for the
encodings: values as JSON text or sealed bytes, identity strings packed, times as
integer microseconds)."""

from __future__ import annotations

from datetime import datetime

from engine_core.records import EventRecord, Lease
from pikku_mongo.wire.checks import check_str
from pikku_mongo.wire.documents import Doc
from pikku_mongo.wire.encoding import (
    dump_value,
    from_us,
    load_value,
    pack,
    pack_opt,
    to_us,
    unpack,
    unpack_opt,
)


def event_to_doc(event: EventRecord) -> Doc:
    """The document of ``event`` (its fields checked)."""
    consumer = event.consumed_by
    return {
        "_id": pack(check_str(event.event_id, "event id")),
        "run_id": pack(check_str(event.run_id, "run id")),
        "name": pack(check_str(event.name, "event name")),
        "payload": dump_value(event.payload),
        "created_at": to_us(event.created_at),
        # An explicit flag: "consumed_by is null" is not portable across servers.
        "consumed": consumer is not None,
        "consumed_by": pack_opt(consumer),
    }


def event_from_doc(doc: Doc) -> EventRecord:
    """The event a document holds."""
    return EventRecord(
        event_id=unpack(doc["_id"]),
        run_id=unpack(doc["run_id"]),
        name=unpack(doc["name"]),
        payload=load_value(doc.get("payload")),
        created_at=from_us(doc["created_at"]),
        consumed_by=unpack_opt(doc.get("consumed_by")),
    )


def lease_expiry(expires_at: datetime, *, gc_from: datetime | None = None) -> Doc:
    """A lease's expiry fields: ``expires_us`` is what queries judge; ``expires_at`` (a
    BSON date: when the lease ends, or ``gc_from`` when given) only feeds the TTL index
    that removes long-dead lease documents."""
    return {"expires_us": to_us(expires_at), "expires_at": gc_from or expires_at}


def lease_from_doc(doc: Doc) -> Lease:
    """The lease a document holds (its stored expiry)."""
    return Lease(
        key=unpack(doc["_id"]),
        holder=unpack(doc["holder"]),
        token=int(doc["token"]),
        expires_at=from_us(doc["expires_us"]),
    )
