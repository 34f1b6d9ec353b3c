"""A step record in the long journal form an earlier version wrote (full field names,
absolute times), for the tests that read such journals."""

from __future__ import annotations

from typing import Any

from engine_core.records import StepRecord
from pikku_mongo.wire.encoding import dump_value, to_us

_TIMES = frozenset({"due_at", "scheduled_at", "updated_at", "ended_at", "claim_expires_at"})
_DEFAULTS: dict[str, Any] = dict(
    StepRecord(run_id="", key="", kind="inline", status="pending").__dict__
)


def long_text(step: StepRecord) -> str:
    """``step`` in the long form an earlier version wrote."""
    data: dict[str, Any] = {"key": step.key}
    for name, value in step.__dict__.items():
        if name in ("run_id", "key") or value == _DEFAULTS[name]:
            continue
        if name in _TIMES:
            value = to_us(value)
        elif name == "history":
            value = [
                {
                    "attempt": e.attempt,
                    "status": e.status,
                    "at": to_us(e.at),
                    "started_at": None if e.started_at is None else to_us(e.started_at),
                    "error": e.error,
                }
                for e in value
            ]
        data[name] = value
    return dump_value(data)
