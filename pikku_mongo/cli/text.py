"""How the CLI prints what it read: tables, a run's page, JSON-ready values."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, is_dataclass
from datetime import datetime
from typing import Any

from engine_core import Engine, QueueStatus, RunStatus, StepStatus
from engine_core.records import UpdateRecord
from pikku_mongo.doctor.stranded import why_stranded


def _jsonable(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return _jsonable(asdict(value))
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _listed(run: RunStatus) -> dict[str, Any]:
    """A run of a list, as JSON: without ``steps`` (a list does not read them; ``runs
    show`` does), never a part of them."""
    data: dict[str, Any] = _jsonable(run)
    data.pop("steps", None)
    return data


def _time(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def _short(value: Any, width: int = 40) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, rows)])


def _error_text(error: dict[str, Any] | None) -> str:
    if not error:
        return ""
    return f"{error.get('type', 'Error')}: {error.get('message', '')}"


async def _show(engine: Engine, run_id: str) -> tuple[Any, str]:
    """``runs show``: the run, its steps and timeline, its forks, and whether a live
    worker will drive it (1 read of the registry when it waits to be driven)."""
    status = await engine.status(run_id)
    history = await engine.history(run_id)
    data = _jsonable(status)
    data["history"] = _jsonable(history)
    data["fork_ids"] = forks = await engine.list_forks(run_id)
    data["stranded"] = undriven = await why_stranded(engine, status)
    pending = await engine.store.list_updates(run_id, pending=True)
    data["pending_updates"] = [
        {"update_id": u.update_id, "name": u.name, "taken": u.consumed_by is not None}
        for u in pending
    ]
    return data, _show_run(status, history, forks, undriven, pending)


def _show_run(
    status: RunStatus,
    history: list[Any],
    forks: list[str] | None = None,
    undriven: str | None = None,
    pending: list[UpdateRecord] | None = None,
) -> str:
    """``runs show``: ``undriven`` says why no live worker will drive the run, if so;
    ``pending``: its updates not answered yet."""
    lines = [
        f"run       {status.run_id}",
        f"workflow  {status.workflow}",
        f"status    {status.status}",
        *([f"version   {status.version}"] if status.version is not None else []),
        *([f"stranded  no live worker will drive this run: {undriven}"] if undriven else []),
        f"created   {_time(status.created_at)}",
        f"updated   {_time(status.updated_at)}",
    ]
    if status.parent_run_id:
        lines.append(f"parent    {status.parent_run_id}")
    if status.forked_from:
        origin = status.forked_from
        lines.append(f"forked    from {origin['run_id']} at step {origin['step'] or '-'}")
    if forks:
        lines.append(f"forks     {', '.join(forks)}")
    if status.patches:
        lines.append(f"patches   {', '.join(status.patches)}")
    if status.queue:
        lines.append(f"queue     {_queue_text(status)}")
    if status.not_before:
        lines.append(f"delayed   until {_time(status.not_before)}")
    if status.deadline_at:
        lines.append(f"deadline  {_time(status.deadline_at)}")
    if status.output is not None:
        lines.append(f"output    {_short(status.output, 100)}")
    if status.error:
        lines.append(f"error     {_short(_error_text(status.error), 100)}")
        if status.error.get("type") == "NonDeterminismError":
            lines.append(f"  recorded {_short(status.error.get('recorded'), 100)}")
            lines.append(f"  found    {_short(status.error.get('found'), 100)}")
    rows = [
        [name, step.status, str(step.attempts), _short(_step_text(step))]
        for name, step in status.steps.items()
    ]
    lines += ["", _table(["step", "status", "attempts", "result / error"], rows)]
    lines += _talk_lines(status, pending or [])
    timeline = [
        [
            f"{entry.at:%H:%M:%S}.{entry.at.microsecond // 1000:03d}",
            entry.step,
            str(entry.attempt),
            entry.status,
            _short(_error_text(entry.error), 60),
        ]
        for entry in history
    ]
    lines += ["", _table(["time", "step", "attempt", "status", "error"], timeline)]
    return "\n".join(lines)


def _talk_lines(status: RunStatus, pending: list[UpdateRecord]) -> list[str]:
    """The values the run published and the updates it has not answered, as tables."""
    lines: list[str] = []
    if status.values:
        rows = [[key, _short(value, 60)] for key, value in status.values.items()]
        lines += ["", _table(["value", "latest"], rows)]
    if pending:
        rows = [
            [u.update_id, u.name, "taken" if u.consumed_by else "waiting", _time(u.created_at)]
            for u in pending
        ]
        lines += ["", _table(["pending update", "name", "state", "sent"], rows)]
    return lines


def _step_text(step: StepStatus) -> Any:
    """A step's result, error, or what it waits for."""
    if step.waiting_for:
        return f"waits for {step.waiting_for}"
    return _error_text(step.error) or step.result


def _queue_text(status: RunStatus) -> str:
    """A run's queue, key and priority: ``orders key=eu priority=5``."""
    parts = [status.queue or "-"]
    if status.queue_key is not None:
        parts.append(f"key={status.queue_key}")
    if status.priority:
        parts.append(f"priority={status.priority}")
    return " ".join(parts)


def _limit(value: int | str | None) -> str:
    return "-" if value is None else str(value)


async def _workers(engine: Engine) -> tuple[Any, str]:
    """``pikku-mongo workers list``: the serving engines, as each last recorded itself."""
    workers = await engine.list_workers()
    headers = ["instance", "host", "pid", "versions", "workflows", "step functions", "queues"]
    headers += ["slots", "started", "last seen"]
    rows = [
        [
            w.instance_id[:12],
            w.host,
            str(w.pid),
            _short(", ".join(w.versions) or "-") + (" (pinned)" if w.pinned else ""),
            _short(", ".join(w.workflows) or "-"),
            _short(", ".join(w.step_functions) or "-"),
            _short(", ".join(w.queues) or "-"),
            f"{w.slots_used}/{w.concurrency}",
            _time(w.started_at),
            _time(w.last_seen),
        ]
        for w in workers
    ]
    text = _table(headers, rows) if workers else "no live workers"
    return [_jsonable(w) for w in workers], text


async def _queues(engine: Engine) -> tuple[Any, str]:
    """``pikku-mongo queues list``: the queues found in the store, with their figures
    and the limits a serving process declared them with (stored); for a fair queue, the
    keys waiting (how many, and those with the most runs)."""
    queues = await engine.list_queues()
    rows = [
        [
            q.name,
            str(q.queued),
            str(q.active),
            str(q.admitted_last_minute),
            str(q.admitted_this_minute),
            _limit(q.concurrency),
            _limit(q.key_concurrency),
            _limit(q.worker_concurrency),
            _limit(q.rate),
            _limit(q.key_rate),
            _limit(q.fairness),
            _keys_waiting(q) if q.fairness else "-",
        ]
        for q in queues
    ]
    headers = ["queue", "queued", "active", "admitted last min", "this min", "concurrency"]
    headers += ["per key", "per worker", "rate", "key rate", "fairness", "keys waiting"]
    return [_jsonable(q) for q in queues], _table(headers, rows)


def _keys_waiting(queue: QueueStatus) -> str:
    """'3 (busy: 120, b: 4, -: 1)': the keys waiting, the busiest first (-: no key)."""
    top = ", ".join(f"{'-' if k is None else k}: {n}" for k, n in queue.top_waiting_keys)
    return f"{queue.keys_waiting} ({top})" if top else str(queue.keys_waiting)
