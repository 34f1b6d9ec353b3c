"""A step record as the run's journal holds it: compact JSON text.

The journal rides on the run document, which every step rewrites whole (on MongoDB's
storage engine as on nx-27017), so each outcome is kept small: short field names, the
fields that differ from their defaults only, the run id left out (it is the run's),
other times as offsets from ``updated_at`` in microseconds, history entries as lists.
A text starts ``{"v":2,`` (:func:`step_to_text`); one without ``"v"`` is the long form an
earlier version wrote (full field names, absolute times, history entries as objects),
read as it is: a journal written before an upgrade needs no migration.
"""

from __future__ import annotations

import base64
import json
from dataclasses import fields
from typing import Any, cast

from bson import ObjectId

from engine_core.records import AttemptEntry, StepRecord, StepState
from pikku_mongo.wire.encoding import Offloaded, dump_text, from_us, opt_from_us, to_us

Doc = dict[str, Any]

_FIELDS = frozenset(f.name for f in fields(StepRecord))
_TIMES = frozenset({"due_at", "scheduled_at", "updated_at", "ended_at", "claim_expires_at"})
_DEFAULTS: dict[str, Any] = dict(
    StepRecord(run_id="", key="", kind="inline", status="pending").__dict__
)
_SKIPPED = frozenset({"run_id", "key", "updated_at"})
#: Short names, fixed for good (stored). A field added later keeps its own name.
SHORT: dict[str, str] = {
    "kind": "i",
    "status": "s",
    "attempts": "a",
    "max_attempts": "m",
    "result": "r",
    "error": "x",
    "due_at": "d",
    "scheduled_at": "sc",
    "updated_at": "u",
    "ended_at": "e",
    "retry_delay": "rd",
    "timeout": "t",
    "function": "f",
    "payload": "p",
    "halted": "h",
    "claim_holder": "ch",
    "claim_expires_at": "ce",
    "child_run_id": "c",
    "event": "ev",
    "compensable": "cp",
    "notified": "n",
    "traceparent": "tp",
    "history": "hi",
    "order": "o",
    "ran": "rn",
    "group": "g",
    "loose": "lo",
    "made_after": "ma",
}
_LONG = {short: name for name, short in SHORT.items()}
#: A value sealed by the engine's codec (``bytes``) is base64 text under a name of its
#: own; one kept in GridFS, its reference (file id in hex, size, sealed) under another.
_SEALED = {"result": "R", "payload": "P"}
_UNSEALED = {short: name for name, short in _SEALED.items()}
_APART = {"result": "RG", "payload": "PG"}
_UNAPART = {short: name for name, short in _APART.items()}


def _apart(value: Offloaded) -> list[Any]:
    return [str(value.file_id), value.size, value.sealed]


def _offloaded(item: list[Any]) -> Offloaded:
    return Offloaded(ObjectId(item[0]), item[1], item[2])


_VERSION = 2


def step_to_text(step: StepRecord) -> str:
    """``step`` as compact journal text (runs for every step: kept cheap)."""
    values = step.__dict__
    base: int = to_us(step.updated_at) if step.updated_at is not None else 0
    data: Doc = {"v": _VERSION, "k": step.key}
    if step.updated_at is not None:
        data["u"] = base
    for name, value in values.items():
        if name in _SKIPPED or value == _DEFAULTS[name]:
            continue
        if name in _TIMES:
            value = to_us(value) - base
        elif name == "history":
            value = [_entry(e, base) for e in value]
        elif type(value) is bytes:
            data[_SEALED[name]] = base64.b64encode(value).decode("ascii")
            continue
        elif type(value) is Offloaded:
            data[_APART[name]] = _apart(value)
            continue
        data[SHORT.get(name, name)] = value
    return dump_text(data)


class RecentTexts:
    """The texts of the small outcomes written lately, by record: the write that takes
    a run's journal to a page sends the texts its entries were journaled as, instead of
    making each again (the engine makes a new record for every change of a step and
    never changes one it handed to a write, so a record found here reads as its text).
    Holds at most ``size`` texts of at most ``largest`` characters each."""

    def __init__(self, size: int = 4096, largest: int = 1024) -> None:
        self._size = size
        self._largest = largest
        self._texts: dict[int, tuple[StepRecord, str]] = {}

    def text(self, step: StepRecord) -> str:
        """``step_to_text(step)``, made once per record while it is held."""
        held = self._texts.get(id(step))
        if held is not None and held[0] is step:
            return held[1]
        text = step_to_text(step)
        if len(text) <= self._largest:
            # Held with its record, so the id is not reused while the text is kept.
            self._texts[id(step)] = (step, text)
            if len(self._texts) > self._size:
                del self._texts[next(iter(self._texts))]  # the oldest
        return text


def _entry(entry: AttemptEntry, base: int) -> list[Any]:
    out: list[Any] = [entry.attempt, entry.status, to_us(entry.at) - base]
    if entry.started_at is not None or entry.error is not None:
        out.append(None if entry.started_at is None else to_us(entry.started_at) - base)
    if entry.error is not None:
        out.append(entry.error)
    return out


def step_from_text(run_id: str, text: Any) -> StepRecord:
    """The step record a journal text holds, in either form."""
    data = cast(Doc, json.loads(cast(str, text)))
    if data.get("v") != _VERSION:
        return _from_long(run_id, data)
    base = int(data.get("u", 0))
    values: Doc = {"run_id": run_id, "key": data["k"], "kind": "inline", "status": "pending"}
    for short, value in data.items():
        name = _LONG.get(short, short)
        if short in _UNSEALED:
            name, value = _UNSEALED[short], base64.b64decode(value)
        elif short in _UNAPART:
            name, value = _UNAPART[short], _offloaded(value)
        if name not in _FIELDS or name == "key":
            continue
        if name == "updated_at":
            values[name] = from_us(value)
        elif name in _TIMES:
            values[name] = from_us(base + int(value))
        elif name == "history":
            values[name] = [_entry_of(e, base) for e in value]
        else:
            values[name] = value
    return StepRecord(**values)


def lean_step_from_text(run_id: str, text: Any) -> StepRecord:
    """:func:`step_from_text` for a dry replay: what a replay reads (kind, status,
    attempts, result, error, order, callable), without the history or the times."""
    data = cast(Doc, json.loads(cast(str, text)))
    if data.get("v") != _VERSION:
        return _from_long(run_id, data)
    return StepRecord(
        run_id=run_id,
        key=data["k"],
        kind=data.get("i", "inline"),
        status=data.get("s", "pending"),
        attempts=data.get("a", 0),
        result=_lean_result(data),
        error=data.get("x"),
        order=data.get("o"),
        ran=data.get("rn"),
        loose=bool(data.get("lo", False)),
        made_after=data.get("ma"),
    )


def _lean_result(data: Doc) -> Any:
    if "R" in data:
        return base64.b64decode(data["R"])
    if "RG" in data:
        return _offloaded(data["RG"])
    return data.get("r")


def _entry_of(item: list[Any], base: int) -> AttemptEntry:
    started = item[3] if len(item) > 3 else None
    return AttemptEntry(
        attempt=int(item[0]),
        status=cast(StepState, item[1]),
        at=from_us(base + int(item[2])),
        started_at=None if started is None else from_us(base + int(started)),
        error=item[4] if len(item) > 4 else None,
    )


def _from_long(run_id: str, data: Doc) -> StepRecord:
    """The long form (full names, absolute times) an earlier version wrote."""
    values: Doc = {}
    for name, value in data.items():
        if name in _TIMES:
            values[name] = opt_from_us(value)
        elif name == "history":
            values[name] = [_long_entry(e) for e in value]
        elif name in _FIELDS:
            values[name] = value
    values["run_id"] = run_id
    values.setdefault("kind", "inline")
    values.setdefault("status", "pending")
    return StepRecord(**values)


def _long_entry(data: Doc) -> AttemptEntry:
    return AttemptEntry(
        attempt=int(data["attempt"]),
        status=cast(StepState, data["status"]),
        at=from_us(data["at"]),
        started_at=opt_from_us(data.get("started_at")),
        error=data.get("error"),
    )
