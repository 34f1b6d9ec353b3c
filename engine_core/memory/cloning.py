"""Copying records in and out of the in-memory store, so callers never share state
with it."""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypeVar, cast

from engine_core.records import (
    AttemptEntry,
    EventRecord,
    InflightStep,
    Lease,
    QueueState,
    RunRecord,
    ScheduleRecord,
    StepRecord,
    UpdateRecord,
    ValueRecord,
)

_T = TypeVar("_T")


#: Leaves shared as they are: nothing can change them.
_IMMUTABLE: frozenset[type] = frozenset({str, int, float, bool, type(None), datetime})
_RECORDS: frozenset[type] = frozenset(
    {
        RunRecord,
        StepRecord,
        AttemptEntry,
        InflightStep,
        EventRecord,
        Lease,
        QueueState,
        ScheduleRecord,
        UpdateRecord,
        ValueRecord,
    }
)


def clone(value: _T) -> _T:
    """A deep copy of records and JSON-shaped values; immutable leaves are shared.

    Much cheaper than ``copy.deepcopy`` on the hot path, and enough: everything the
    engine stores is dicts, lists, scalars, datetimes and the record dataclasses.
    """
    kind = type(value)
    if kind in _IMMUTABLE:
        return value
    if kind is dict:
        return cast(_T, {k: clone(v) for k, v in cast(dict[str, Any], value).items()})
    if kind is list:
        return cast(_T, [clone(v) for v in cast(list[Any], value)])
    if kind is StepRecord:
        return cast(_T, _clone_step(cast(StepRecord, value)))
    if kind in _RECORDS:
        twin: _T = object.__new__(kind)
        state = twin.__dict__
        for name, item in value.__dict__.items():
            state[name] = item if type(item) in _IMMUTABLE else clone(item)
        return twin
    return value


def _clone_step(step: StepRecord) -> StepRecord:
    # The hot path's clone: a step's mutable parts are its values and its history list
    # (whose entries nobody changes once written; a history is only ever appended to).
    twin = object.__new__(StepRecord)
    state = twin.__dict__
    state.update(step.__dict__)
    for name in ("result", "payload", "error"):
        item = state[name]
        if type(item) not in _IMMUTABLE:
            state[name] = clone(item)
    state["history"] = list(step.history)
    return twin
