"""Mapping between the engine's records and the BSON documents stored for them.

Three encodings keep user data from ever being read as query syntax, and one keeps
times exact:

* Values (run input/output/error/wire, step result/payload/error, event payload)
  and history entries are stored as JSON text, so a user key such as ``"$set"`` or
  ``"a.b"`` is just characters inside a string.
* Identity strings that filters and sorts compare (run ids, step keys, names,
  holders, consumers) go through :func:`pack`, an order-preserving escape of the NUL
  character (nx-27017 cannot match a string containing NUL by equality). It is the
  identity on every string without ``\\x00`` or ``\\x01``.
* The run's ``inflight`` map is keyed by :func:`inflight_field` (a digest of the step
  key), never by the user's key itself; the real key is stored inside the entry.

Times are stored as integer microseconds since the Unix epoch (UTC), not as BSON dates:
nx-27017 compares dates through SQLite's ``datetime()``, which drops everything below
the second (a lease expiring in 0.9 s would already count as expired), and stores a
date written by ``$set`` as a string. Integers compare exactly on every server and keep
the microseconds the in-memory store keeps. The one BSON date is a lease's
``expires_at``, there only for the TTL index (clean-up); no query reads it.

Step documents written by an upsert (see ``MongoStore.update_step``) may lack fields
that were never written; :func:`step_from_doc` reads a missing field as the
``StepRecord`` default.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import fields
from datetime import datetime
from typing import Any, cast

from engine_core.records import (
    TERMINAL,
    AttemptEntry,
    InflightStep,
    RunRecord,
    RunState,
    StepKind,
    StepRecord,
    StepState,
)
from pikku_mongo.wire.checks import check_str
from pikku_mongo.wire.encoding import (
    ID_SEPARATOR,
    dump_text,
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
from pikku_mongo.wire.flow_fields import flow_fields
from pikku_mongo.wire.journal_text import lean_step_from_text, step_from_text, step_to_text

Doc = dict[str, Any]

STEP_FIELDS: frozenset[str] = frozenset(f.name for f in fields(StepRecord))
#: StepRecord fields stored as JSON text.
_STEP_JSON_FIELDS = frozenset({"result", "payload", "error"})
#: StepRecord fields holding times.
_STEP_TIME_FIELDS = frozenset(
    {"due_at", "scheduled_at", "updated_at", "ended_at", "claim_expires_at"}
)
#: StepRecord fields that filters compare as identity strings (packed).
_STEP_PACKED_FIELDS = frozenset(
    {"function", "claim_holder", "child_run_id", "event", "idempotency_of"}
)
#: Fields an update may not change: they are the step's identity.
STEP_IDENTITY = frozenset({"run_id", "key"})
#: The storage format of this version; see ``MongoStore.init`` for the migration.
FORMAT = 4


@functools.lru_cache(maxsize=4096)
def inflight_field(key: str) -> str:
    """The field name under ``inflight`` for step ``key``: a digest, never user text.
    (Cached: a step's field is named by the write that starts it and by the next.)"""
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16)
    return "k" + digest.hexdigest()


# ---- runs ---------------------------------------------------------------------------


def inflight_entry(
    key: str,
    attempt: int,
    started_at: datetime,
    *,
    order: int | None = None,
    group: int | None = None,
) -> Doc:
    entry: Doc = {"key": key, "attempt": attempt, "started_at": to_us(started_at)}
    # A first attempt's place, until its record holds it (absent otherwise: the run
    # document stays as small as before).
    if order is not None:
        entry["order"] = int(order)
    if group is not None:
        entry["group"] = int(group)
    return entry


def made_key(created_us: int, packed_id: str) -> str:
    """A run document's ``made``: its creation time (microseconds, zero-padded), then
    its packed id; one string in (creation time, id) order (see ``pikku_mongo.store.listing``)."""
    return f"{created_us:017d}:{packed_id}"


def run_to_doc(run: RunRecord) -> Doc:
    return {
        "_id": pack(check_str(run.run_id, "run id")),
        "workflow": pack(check_str(run.workflow, "workflow")),
        "status": check_str(run.status, "run status"),
        "input": dump_value(run.input),
        "output": dump_value(run.output),
        "error": dump_value(run.error),
        "parent_run_id": pack_opt(run.parent_run_id),
        "parent_step": pack_opt(run.parent_step),
        "wire": dump_value(run.wire),
        "pending_pass": bool(run.pending_pass),
        "passes": run.passes,
        "token": run.token,
        "inflight": {
            inflight_field(key): inflight_entry(
                key, step.attempt, step.started_at, order=step.order, group=step.group
            )
            for key, step in run.inflight.items()
        },
        # An equality query on every server ("$ne: {}" on the map is not portable).
        "open_pass": bool(run.open_pass),
        "created_at": to_us(run.created_at),
        "updated_at": to_us(run.updated_at),
        # Lists by creation time (see ``pikku_mongo.store.listing``).
        "made": made_key(to_us(run.created_at), pack(run.run_id)),
        # The run's lease: free when ``lease_us`` is in the past (0: never held).
        "lease_us": opt_to_us(run.lease_expires_at) or 0,
        "holder": pack_opt(run.lease_holder),
        "journal": {inflight_field(k): step_to_text(s) for k, s in run.journal.items()},
        "changed": {inflight_field(k): pack(k) for k in run.changed},
        "keys": run.key_scheme,
        "version": pack_opt(run.version),
        **flow_fields(run),
        **fork_fields(run),
        **({} if run.retention is None else {"retention": float(run.retention)}),
        **(expiry_fields(run.expire_at) if run.status in TERMINAL else {}),
    }


def expiry_fields(expire_at: datetime | None) -> Doc:
    """What a write that ends a run sets for its retention: ``expire_us``, when it may be
    deleted (a sweep's sparse index), and ``unstamped`` (the same), until its documents
    carry the TTL field ``expire_at`` (see ``pikku_mongo.store.prune_ops``)."""
    if expire_at is None:
        return {}
    due = to_us(expire_at)
    return {"expire_us": due, "unstamped": due}


#: What a write that makes a run live again removes: it never expires while it lives.
EXPIRY_UNSET: Doc = {"expire_us": "", "unstamped": "", "expire_at": ""}


def fork_fields(run: RunRecord) -> Doc:
    """A fork's origin (``forked``: the original's packed id, indexed sparse, so the
    forks of a run are one index lookup; ``forked_step``); absent on other runs."""
    if run.forked_from is None:
        return {}
    return {
        "forked": pack(check_str(run.forked_from["run_id"], "forked_from run id")),
        "forked_step": pack(str(run.forked_from.get("step", ""))),
    }


def run_from_doc(doc: Doc) -> RunRecord:
    inflight = {
        cast(str, entry["key"]): InflightStep(
            attempt=int(entry["attempt"]),
            started_at=from_us(entry["started_at"]),
            order=entry.get("order"),
            group=entry.get("group"),
        )
        for entry in cast(dict[str, Doc], doc.get("inflight") or {}).values()
    }
    run_id = unpack(doc["_id"])
    return RunRecord(
        run_id=run_id,
        workflow=unpack(doc["workflow"]),
        status=cast(RunState, doc["status"]),
        input=load_value(doc.get("input")),
        created_at=from_us(doc["created_at"]),
        updated_at=from_us(doc["updated_at"]),
        output=load_value(doc.get("output")),
        error=load_value(doc.get("error")),
        parent_run_id=unpack_opt(doc.get("parent_run_id")),
        parent_step=unpack_opt(doc.get("parent_step")),
        wire=load_value(doc.get("wire")) or {},
        pending_pass=bool(doc.get("pending_pass", True)),
        passes=int(doc.get("passes", 0)),
        token=int(doc.get("token", 0)),
        inflight=inflight,
        open_pass=bool(doc.get("open_pass", False)),
        lease_holder=unpack_opt(doc.get("holder")),
        lease_expires_at=opt_from_us(doc.get("lease_us") or None),
        journal=_journal_of(run_id, doc.get("journal")),
        changed=sorted(unpack(k) for k in cast(Doc, doc.get("changed") or {}).values()),
        key_scheme=int(doc.get("keys", 1)),
        queue=unpack_opt(doc.get("queue")),
        queue_key=unpack_opt(doc.get("qkey")),
        priority=int(doc.get("priority", 0)),
        dedup_id=unpack_opt(doc.get("dedup_id")),
        not_before=opt_from_us(doc.get("not_before_us")),
        deadline_at=opt_from_us(doc.get("deadline")),
        deadline_s=float(doc["deadline_s"]) if doc.get("deadline_s") is not None else None,
        version=unpack_opt(doc.get("version")),
        forked_from=(
            {"run_id": unpack(doc["forked"]), "step": unpack(doc.get("forked_step") or "")}
            if doc.get("forked") is not None
            else None
        ),
        fair=doc.get("fair") == True,  # noqa: E712 - nx-27017 reads a $set True back as 1
        queue_turn=int(doc["qturn"]) if doc.get("qturn") is not None else None,
        debounce_key=unpack_opt(doc.get("debounce")),
        retention=doc.get("retention"),
        expire_at=opt_from_us(doc.get("expire_us")),
    )


def _journal_of(run_id: str, stored: Any, lean: bool = False) -> dict[str, StepRecord]:
    read = lean_step_from_text if lean else step_from_text
    steps = (read(run_id, text) for text in cast(Doc, stored or {}).values())
    return {step.key: step for step in steps}


def lean_run_from_doc(doc: Doc) -> RunRecord:
    """The run as a dry replay reads it (``lean=True`` lists): its identity, status,
    input, version and key scheme, and its journal without histories or step times;
    every other field at its default. Decoding thousands of whole runs, histories
    included, was most of ``replay_check``'s time in the client."""
    run_id = unpack(doc["_id"])
    return RunRecord(
        run_id=run_id,
        workflow=unpack(doc["workflow"]),
        status=cast(RunState, doc["status"]),
        input=load_value(doc.get("input")),
        created_at=from_us(doc["created_at"]),
        updated_at=from_us(doc["updated_at"]),
        parent_run_id=unpack_opt(doc.get("parent_run_id")),
        journal=_journal_of(run_id, doc.get("journal"), lean=True),
        key_scheme=int(doc.get("keys", 1)),
        version=unpack_opt(doc.get("version")),
    )


# ---- steps --------------------------------------------------------------------------


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _from_iso(text: Any) -> datetime | None:
    return None if text is None else datetime.fromisoformat(cast(str, text))


def entry_to_text(entry: AttemptEntry) -> str:
    """One history entry as JSON text, its times in ISO 8601 (exact to the microsecond).

    Entries are strings, not subdocuments: nx-27017 stores a subdocument ``$push``ed
    onto an existing array as a string, so a portable history pushes strings."""
    return dump_text(
        {
            "attempt": entry.attempt,
            "status": entry.status,
            "at": _iso(entry.at),
            "started_at": _iso(entry.started_at),
            "error": entry.error,
        }
    )


def entry_from_text(text: Any) -> AttemptEntry:
    """The attempt entry a step document's history holds as ``text``."""
    data = cast(Doc, json.loads(cast(str, text)))
    at = _from_iso(data["at"])
    assert at is not None
    return AttemptEntry(
        attempt=int(data["attempt"]),
        status=cast(StepState, data["status"]),
        at=at,
        started_at=_from_iso(data.get("started_at")),
        error=data.get("error"),
    )


def step_value(name: str, value: Any) -> Any:
    """The stored form of one StepRecord field (``name`` is a known field name)."""
    if name in _STEP_JSON_FIELDS:
        return dump_value(value)
    if name in _STEP_TIME_FIELDS:
        return opt_to_us(value)
    if name in _STEP_PACKED_FIELDS:
        return None if value is None else pack(check_str(value, f"step {name}"))
    if name == "history":
        return [entry_to_text(e) for e in cast(list[AttemptEntry], value)]
    return value


def step_doc_id(run_id: str, key: str) -> str:
    """A step's ``_id``: its run id and key, unambiguously, so the hot path finds it by
    ``_id`` alone (on every server the fastest lookup, whatever the collection holds)."""
    return pack(check_str(run_id, "run id")) + ID_SEPARATOR + pack(check_str(key, "step key"))


#: StepRecord fields stored as they are (everything not encoded by :func:`step_value`).
_STEP_PLAIN = tuple(
    f.name
    for f in fields(StepRecord)
    if f.name not in STEP_IDENTITY | _STEP_JSON_FIELDS | _STEP_TIME_FIELDS | _STEP_PACKED_FIELDS
    and f.name != "history"
)
#: The other StepRecord fields, in declaration order (a document's field order).
_STEP_ENCODED = tuple(
    f.name for f in fields(StepRecord) if f.name not in STEP_IDENTITY and f.name not in _STEP_PLAIN
)


def step_to_doc(step: StepRecord) -> Doc:
    """A step record's document (the journal copies 64 at a time: kept cheap)."""
    values = step.__dict__
    doc: Doc = {
        "_id": step_doc_id(step.run_id, step.key),
        "fmt": FORMAT,
        "run_id": pack(check_str(step.run_id, "run id")),
        "key": pack(check_str(step.key, "step key")),
    }
    for name in _STEP_PLAIN:
        doc[name] = values[name]
    for name in _STEP_ENCODED:
        doc[name] = step_value(name, values[name])
    return doc


_STEP_DEFAULTS = StepRecord(run_id="", key="", kind="inline", status="pending")


def lean_step_from_doc(doc: Doc) -> StepRecord:
    """The step as a dry replay reads it (``lean=True`` reads): identity, kind, status,
    attempts, result, error, order and callable; no history, payload or times."""
    return StepRecord(
        run_id=unpack(doc["run_id"]),
        key=unpack(doc["key"]),
        kind=cast(StepKind, doc.get("kind", "inline")),
        status=cast(StepState, doc.get("status", "pending")),
        attempts=int(doc.get("attempts", 0)),
        result=load_value(doc.get("result")),
        error=load_value(doc.get("error")),
        function=unpack_opt(doc.get("function")),
        child_run_id=unpack_opt(doc.get("child_run_id")),
        event=unpack_opt(doc.get("event")),
        order=doc.get("order"),
        ran=doc.get("ran"),
        loose=bool(doc.get("loose", False)),
        made_after=doc.get("made_after"),
    )


def step_from_doc(doc: Doc) -> StepRecord:
    def get(name: str) -> Any:
        return doc[name] if name in doc else getattr(_STEP_DEFAULTS, name)

    return StepRecord(
        run_id=unpack(doc["run_id"]),
        key=unpack(doc["key"]),
        kind=cast(StepKind, get("kind")),
        status=cast(StepState, get("status")),
        attempts=int(get("attempts")),
        max_attempts=int(get("max_attempts")),
        result=load_value(doc.get("result")),
        error=load_value(doc.get("error")),
        due_at=opt_from_us(doc.get("due_at")),
        scheduled_at=opt_from_us(doc.get("scheduled_at")),
        updated_at=opt_from_us(doc.get("updated_at")),
        ended_at=opt_from_us(doc.get("ended_at")),
        retry_delay=get("retry_delay"),
        timeout=get("timeout"),
        function=unpack_opt(doc.get("function")),
        payload=load_value(doc.get("payload")),
        halted=bool(get("halted")),
        claim_holder=unpack_opt(doc.get("claim_holder")),
        claim_expires_at=opt_from_us(doc.get("claim_expires_at")),
        child_run_id=unpack_opt(doc.get("child_run_id")),
        event=unpack_opt(doc.get("event")),
        compensable=bool(get("compensable")),
        notified=bool(get("notified")),
        traceparent=get("traceparent"),
        history=[entry_from_text(e) for e in cast(list[str], doc.get("history") or [])],
        order=doc.get("order"),
        ran=doc.get("ran"),
        group=doc.get("group"),
        loose=bool(doc.get("loose", False)),
        made_after=doc.get("made_after"),
        idempotency_of=unpack_opt(doc.get("idempotency_of")),
    )


# ---- the run's journal: whole step records as compact JSON text --------------------
# (see ``pikku_mongo.wire.journal_text``)
