"""A run document's flow-control fields (queues, dedup ids, delays, deadlines, fair
turns, debounce keys) and the keys they are indexed by."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engine_core.records import TERMINAL, RunRecord
from pikku_mongo.wire.checks import check_str
from pikku_mongo.wire.encoding import ID_SEPARATOR, pack, to_us

Doc = dict[str, Any]


#: Priorities are stored offset so that every one is a non-negative fixed-width number.
_PRIORITY_OFFSET = 10**15


def line_key(
    queue: str, priority: int, created_at: datetime, run_id: str, turn: int | None = None
) -> str:
    """A run's place in its queue's line, as one string whose order is admission order
    (priority, then, on a fair queue, turn, then start time, then run id): one
    single-field index serves the head of any queue (nx-27017 plans with single-field
    indexes only). A turn is written after a ``t``, which sorts after every digit: runs
    without a turn (started before the queue was fair) go first."""
    place = "" if turn is None else f"t{int(turn):020d}"
    return (
        f"{pack(queue)}{ID_SEPARATOR}{priority + _PRIORITY_OFFSET:016d}{place}"
        f"{to_us(created_at):020d}{pack(run_id)}"
    )


def line_bounds(queue: str) -> tuple[str, str]:
    """The range of :func:`line_key` values of one queue. A packed name holds the
    character 1 only before a 1 or a 2, so the name of another queue that extends this
    one packs either below the separator (characters 1, 3) or from character 2 up, past
    the range's end. (No NUL: nx-27017 keeps strings in SQLite.)"""
    return f"{pack(queue)}{ID_SEPARATOR}", f"{pack(queue)}\x01\x04"


def dedup_key(queue: str | None, dedup_id: str) -> str:
    """The ``_id`` of the dedup claim of ``dedup_id`` on ``queue``."""
    return f"{pack(queue or '')}{ID_SEPARATOR}{pack(dedup_id)}"


def held_key(queue: str, key: str | None) -> str:
    """An admitted run's place among its queue's admitted runs (``qheld``): the queue
    first, so the admitted runs of a queue are one range of the index
    (:func:`line_bounds`), then its key, so those of one key are one value."""
    return f"{pack(queue)}{ID_SEPARATOR}" + ("n" if key is None else "k" + pack(key))


def flow_fields(run: RunRecord) -> Doc:
    """A run's flow-control fields. The indexed ones exist only while they mean
    something (sparse indexes skip absent fields, not nulls): ``dedup``, ``qlive`` and
    ``deadline_due`` until the run is terminal, ``not_before_us`` while it waits out a
    delay, ``line`` while it waits in its queue's line, ``qheld`` from its admission
    until it ends."""
    doc: Doc = {"priority": int(run.priority)}
    for name, value in (
        ("queue", run.queue),
        ("qkey", run.queue_key),
        ("dedup_id", run.dedup_id),
        ("debounce", run.debounce_key),
    ):
        if value is not None:
            doc[name] = pack(check_str(value, name))
    if run.deadline_at is not None:
        doc["deadline"] = to_us(run.deadline_at)
    if run.deadline_s is not None:
        doc["deadline_s"] = float(run.deadline_s)
    if run.fair:
        doc["fair"] = True
    if run.queue_turn is not None:
        doc["qturn"] = int(run.queue_turn)
    if run.status in TERMINAL:
        return doc
    if run.dedup_id is not None:
        doc["dedup"] = dedup_key(run.queue, run.dedup_id)
    if run.queue is not None:
        doc["qlive"] = pack(run.queue)
    if run.deadline_at is not None:
        doc["deadline_due"] = to_us(run.deadline_at)
    if run.status == "queued":
        if run.not_before is not None:
            doc["not_before_us"] = to_us(run.not_before)
        elif run.queue is not None:
            doc["line"] = line_key(
                run.queue, run.priority, run.created_at, run.run_id, run.queue_turn
            )
    elif run.queue is not None:
        doc["qheld"] = held_key(run.queue, run.queue_key)
    return doc


#: What a write that ends a run removes (see :func:`flow_fields`).
ENDED_UNSET: Doc = {
    "dedup": "",
    "qlive": "",
    "deadline_due": "",
    "not_before_us": "",
    "line": "",
    "qheld": "",
}
