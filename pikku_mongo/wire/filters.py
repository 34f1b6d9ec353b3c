"""Query filters and update documents built from checked arguments.

Every user-supplied string here has been through :mod:`pikku_mongo.wire.checks` and
:func:`~pikku_mongo.wire.documents.pack`; every field name is one of ours.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engine_core.records import AttemptEntry, StepGuard, StepRecord
from pikku_mongo.wire.checks import check_datetime, check_int, check_str, check_strs
from pikku_mongo.wire.documents import (
    STEP_FIELDS,
    STEP_IDENTITY,
    Doc,
    entry_to_text,
    step_to_doc,
    step_value,
)
from pikku_mongo.wire.encoding import MIN_TIME, pack, to_us
from pikku_mongo.wire.shard_keys import step_filter


def eq(value: Any) -> Doc:
    """An equality condition on a field other than ``_id``, spelled ``$eq``: the same on
    MongoDB, and the form nx-27017 can serve from an index (it reads ``{f: v}`` as an
    array-containment test that no index serves in updates, deletes and
    findAndModify)."""
    return {"$eq": value}


def one_of(values: list[str]) -> Doc:
    """A field equal to one of ``values`` (not empty), bounded by their least and
    greatest too: the same documents on MongoDB, but nx-27017 reads a bare ``$in`` as an
    array-containment test that scans the whole collection, and serves the bounds from
    the field's index (a read of 256 runs' steps went from a scan of every step to the
    steps of those runs and the runs between them)."""
    ordered = sorted(values)
    return {"$gte": ordered[0], "$lte": ordered[-1], "$in": ordered}


def any_of(*alternatives: Doc) -> Doc:
    """Conditions of which one must hold, to put beside a filter's other fields. Spelled
    ``{"$and": [{"$or": [...]}]}``: the same on MongoDB, but in a write (an update, a
    findAndModify) nx-27017 drops every other top-level condition of a filter that has
    a top-level ``$or`` (an ``_id`` or a run id too), and keeps them beside an ``$and``."""
    return {"$and": [{"$or": list(alternatives)}]}


def step_id(run_id: str, key: str) -> Doc:
    """The filter of one step document: its ``_id`` and its shard key (see
    :mod:`pikku_mongo.wire.shard_keys`)."""
    return step_filter(run_id, key)


def step_upsert(step: StepRecord) -> tuple[Doc, Doc]:
    """The upsert that writes ``step`` to its document unless the document holds more
    attempts already (its duplicate key is then the guard failing): safe to repeat."""
    doc = step_to_doc(step)
    del doc["_id"]
    guard = step_id(step.run_id, step.key)
    guard["attempts"] = {"$lte": check_int(step.attempts, "attempts")}
    return guard, {"$set": doc}


def guard_filter(run_id: str, key: str, guard: StepGuard) -> Doc:
    """The step document matching ``guard`` (absent conditions are not checked)."""
    query = step_id(run_id, key)
    if guard.status_in is not None:
        statuses = check_strs(guard.status_in, "guard status")
        query["status"] = eq(statuses[0]) if len(statuses) == 1 else {"$in": statuses}
    attempts: Doc = {}
    if guard.attempts_below is not None:
        attempts["$lt"] = check_int(guard.attempts_below, "guard attempts_below")
    if guard.attempts is not None:
        attempts["$eq"] = check_int(guard.attempts, "guard attempts")
    if attempts:
        query["attempts"] = attempts
    if guard.claim_holder is not None:
        query["claim_holder"] = eq(pack(check_str(guard.claim_holder, "guard claim holder")))
    return query


def check_changes(changes: dict[str, Any]) -> None:
    """Refuse changes to fields a step record does not have (``ValueError``)."""
    unknown = set(changes) - STEP_FIELDS
    if unknown:
        raise ValueError(f"unknown step fields {sorted(unknown)}")
    if STEP_IDENTITY & set(changes):
        raise ValueError("a step's run_id and key cannot be changed")


def step_update(changes: dict[str, Any], entry: AttemptEntry | None) -> Doc:
    """``$set`` the changes and ``$push`` the entry (folded into ``$set`` when the
    changes replace the history themselves, as two operators on one path conflict)."""
    to_set = {name: step_value(name, value) for name, value in changes.items()}
    update: Doc = {}
    if entry is not None:
        if "history" in to_set:
            to_set["history"] = [*to_set["history"], entry_to_text(entry)]
        else:
            update["$push"] = {"history": entry_to_text(entry)}
    if to_set:
        update["$set"] = to_set
    return update


def claim_filter(now: datetime) -> Doc:
    """Claimable queue jobs: dispatched steps ``scheduled``, not halted, due by ``now``.
    Equalities then one range, in the order of the claim index, so nx-27017 serves it
    from that index (the step function is sorted out by the claimer)."""
    return {
        "status": eq("scheduled"),
        "kind": eq("dispatch"),
        "halted": eq(False),
        "due_at": {"$gte": MIN_TIME, "$lte": to_us(now)},
    }


def lapsed_claims_filter(now: datetime) -> Doc:
    """The filter of the queue jobs whose claim expired before ``now``."""
    return {
        "status": eq("running"),
        "kind": eq("dispatch"),
        "claim_expires_at": {"$gte": MIN_TIME, "$lt": to_us(now)},
    }


def scheduled_from(due: datetime | None) -> Doc:
    """Scheduled steps due at ``due`` or later (every one with a due time when None), for
    a keyset scan in ``due_at`` order. (Ties at the page boundary are sorted out by the
    scanner: an ``$or`` on the tie breakers is a full scan on nx-27017.)"""
    low = MIN_TIME if due is None else max(MIN_TIME, to_us(check_datetime(due, "page due_at")))
    return {"status": eq("scheduled"), "due_at": {"$gte": low}}


def _successor(text: str) -> str | None:
    """The least string greater than every string that starts with ``text`` (code point
    order, which is UTF-8 byte order: how MongoDB and both test servers compare), or None
    when there is none (``text`` is empty or only U+10FFFF)."""
    while text:
        last = ord(text[-1]) + 1
        if last == 0xD800:  # surrogates never reach the server; skip past them
            last = 0xE000
        if last <= 0x10FFFF:
            return text[:-1] + chr(last)
        text = text[:-1]
    return None


def id_prefix_range(prefix: str) -> Doc:
    """``_id`` bounds matching exactly the ids that start with ``prefix``: a range on the
    packed id (``pack`` maps each character on its own, so it keeps prefixes), which the
    ``_id`` index serves, never a pattern."""
    low = pack(check_str(prefix, "run id prefix"))
    bounds: Doc = {"$gte": low}
    high = _successor(low)
    if high is not None:
        bounds["$lt"] = high
    return bounds
