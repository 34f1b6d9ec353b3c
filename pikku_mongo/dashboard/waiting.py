"""Why a run waits, in words, and the events an operator may send it from its page."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from engine_core import QueueStatus, RunStatus
from pikku_mongo.dashboard.params import BadRequest

#: The most characters of a payload the "send event" form takes.
MAX_PAYLOAD = 8000


def why_waiting(
    run: RunStatus,
    queue: QueueStatus | None,
    now: datetime | None = None,
    undriven: str | None = None,
) -> list[str]:
    """The reasons a queued, suspended or parked run is not moving, one line each;
    ``undriven``: why no live worker will drive it, if none will."""
    now = now or datetime.now(UTC)
    reasons: list[str] = []
    if undriven is not None:
        reasons.append(f"No live worker will drive it: {undriven}.")
    if run.status == "queued":
        if run.not_before is not None and run.not_before > now:
            reasons.append(f"Delayed: it begins no earlier than {_at(run.not_before)}.")
        elif run.queue is not None:
            reasons.append(_queue_reason(run, queue))
    elif run.status == "suspended":
        reasons.append("Suspended by an operator: no step of it starts until it is resumed.")
    if run.status in ("running", "suspended"):
        for name, step in run.steps.items():
            if step.status == "scheduled" and step.waiting_for:
                reasons.append(f"Step {name} waits for {step.waiting_for}.")
    return reasons


def _queue_reason(run: RunStatus, queue: QueueStatus | None) -> str:
    text = f"Waiting for admission to queue {run.queue}"
    if queue is None:
        return text + "."
    limits = []
    if queue.concurrency is not None:
        limits.append(f"{queue.active} of {queue.concurrency} slots taken")
    if queue.key_concurrency is not None and run.queue_key is not None:
        limits.append(f"at most {queue.key_concurrency} at once for key {run.queue_key}")
    if queue.rate is not None:
        limits.append(f"rate {queue.rate}, {queue.admitted_this_minute} admitted this minute")
    limits.append(f"{queue.queued} run(s) in line, by priority then start time")
    return f"{text}: " + "; ".join(limits) + "."


def _at(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def awaited_events(run: RunStatus) -> list[str]:
    """The events the run waits for now (each once, in step order)."""
    if run.status not in ("running", "suspended"):
        return []
    events = [s.event for s in run.steps.values() if s.status == "scheduled" and s.event]
    return list(dict.fromkeys(e for e in events if e is not None))


def event_form(source: Mapping[str, Any], run: RunStatus) -> tuple[str, str, Any]:
    """The event name (one the run waits for), the payload as typed, and its value."""
    names = _values(source, "event")
    if len(names) != 1 or names[0] not in awaited_events(run):
        waited = ", ".join(awaited_events(run)) or "none"
        raise BadRequest(f"the run waits for no such event (it waits for: {waited})")
    texts = _values(source, "payload") or [""]
    text = texts[0].strip()
    if len(texts) != 1 or len(text) > MAX_PAYLOAD:
        raise BadRequest(f"the payload must be one JSON text of at most {MAX_PAYLOAD} characters")
    try:
        payload = json.loads(text) if text else None
    except ValueError as exc:
        raise BadRequest(f"the payload is not JSON ({exc}); leave it empty for none") from None
    return names[0], text, payload


def _values(source: Mapping[str, Any], name: str) -> Sequence[str]:
    if hasattr(source, "getlist"):
        return list(source.getlist(name))
    value = source.get(name, [])
    return list(value) if isinstance(value, list) else [value]
