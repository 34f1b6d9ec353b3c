"""What each ``pikku-mongo`` command that reads or steers the store does, on a store
opened for that one command: it returns the command's JSON data and its text."""

from __future__ import annotations

import argparse
from typing import Any

import pikku_mongo.cli.repair as repair_cli
from engine_core import Engine, RunStatus
from pikku_mongo.cli.tail import tail
from pikku_mongo.cli.talk import talk
from pikku_mongo.cli.text import (
    _jsonable,
    _listed,
    _queue_text,
    _queues,
    _show,
    _table,
    _time,
    _workers,
)
from pikku_mongo.doctor import diagnose, render
from pikku_mongo.store.mongo_store import MongoStore
from pikku_mongo.wire.server import ensure_reachable
from pikku_mongo.wire.uri import redact

#: How long a command waits for a server to answer before it gives up (seconds).
SERVER_TIMEOUT_S = 5.0


def _client_options(uri: str) -> dict[str, Any]:
    """Short timeouts for a command-line tool, unless the URI chose its own."""
    options: dict[str, Any] = {}
    query = uri.partition("?")[2].lower()
    timeout_ms = int(SERVER_TIMEOUT_S * 1000)
    for name in ("serverSelectionTimeoutMS", "connectTimeoutMS"):
        if name.lower() + "=" not in query:
            options[name] = timeout_ms
    return options


async def connect(uri: str) -> MongoStore:
    """A store for one command, once the server answered a ping (not retried: an
    unreachable server is one line, at once)."""
    store = MongoStore.from_uri(uri, **_client_options(uri))
    try:
        await ensure_reachable(store.database, redact(uri), SERVER_TIMEOUT_S + 1)
    except BaseException:
        await store.close()
        raise
    return store


async def doctor(uri: str) -> tuple[dict[str, Any], str, int]:
    """``pikku-mongo doctor``: the report as JSON and as a table, and the exit code."""
    store = await connect(uri)
    try:
        report = await diagnose(store)
    finally:
        await store.close()
    return report.to_json(), render(report), 0 if report.ok else 1


async def tail_command(args: argparse.Namespace, uri: str) -> int:
    """``pikku-mongo runs tail``: prints the entries as they come; the exit code."""
    store = await connect(uri)
    try:
        return await tail(store, args.run_id, args.stream, args.json)
    finally:
        await store.close()


async def run_command(args: argparse.Namespace, uri: str) -> tuple[Any, str]:
    """Every other command, through an engine (a client) on the store."""
    store = await connect(uri)
    engine = Engine(store)
    try:
        if args.command == "init":
            await store.init()
            return {"initialised": True}, "indexes created"
        if args.command == "recover":
            return await _recover(engine)
        if args.command == "prune":
            deleted = await engine.delete_finished_runs(args.older_than)
            return {"deleted": deleted}, f"deleted {deleted} finished run(s)"
        if args.command == "schedules":
            return await _schedules(engine, args)
        if args.command == "queues":
            return await _queues(engine)
        if args.command == "workers":
            return await _workers(engine)
        return await _runs(engine, args)
    finally:
        await store.close()


async def _recover(engine: Engine) -> tuple[Any, str]:
    """``pikku-mongo recover``: one recovery pass."""
    report = await engine.recover()
    data = {
        "skipped": report.skipped,
        "woken": report.woken,
        "rearmed": report.rearmed,
        "redispatched": report.redispatched,
        "resumed": report.resumed,
        "expired": report.expired,
        "runs": report.runs,
    }
    text = (
        "another instance holds the recovery lease; nothing done"
        if report.skipped
        else f"recovery: {report.summary()}"
    )
    return data, text


async def _runs(engine: Engine, args: argparse.Namespace) -> tuple[Any, str]:
    """``pikku-mongo runs ...``: list, show, or steer one run or many."""
    action = args.action
    if action == "list":
        return await _list_runs(engine, args)
    if action == "show":
        return await _show(engine, args.run_id)
    if action in ("update", "value"):
        return await talk(engine, args)
    if action in ("fork", "cancel", "retry"):
        if repair_cli.is_bulk(args):
            return await repair_cli.act_on_many(engine, args)
        forked = await repair_cli.act_on_one(engine, args)
        if forked is not None:
            return forked
    if action == "cancel":
        await engine.cancel(args.run_id, compensate=args.compensate)
    elif action == "suspend":
        await engine.suspend(args.run_id)
    elif action == "resume":
        await engine.resume(args.run_id)
    elif action == "retry":
        await engine.retry(args.run_id)
    status = await engine.status(args.run_id)
    return {"run_id": status.run_id, "status": status.status}, (
        f"run {status.run_id} is {status.status}"
    )


async def _list_runs(engine: Engine, args: argparse.Namespace) -> tuple[Any, str]:
    """``pikku-mongo runs list``: a page of runs as a table, with how to get the next."""
    runs = await engine.list_runs(
        workflow=args.workflow,
        status=args.status,
        limit=args.limit,
        after=args.after,
        version=args.version,
        order=args.order,
    )
    text = _runs_table(runs)
    if len(runs) == args.limit:
        order = "" if args.order == "newest" else f" --order {args.order}"
        text += f"\n(more: --after {runs[-1].run_id}{order})"
    return [_listed(r) for r in runs], text


def _runs_table(runs: list[RunStatus]) -> str:
    """The runs as a table: a version column when any has one, a queue column when any
    is on a queue."""
    headers = ["run", "workflow", "status", "created", "updated"]
    rows = [
        [r.run_id, r.workflow, r.status, _time(r.created_at), _time(r.updated_at)] for r in runs
    ]
    if any(r.version is not None for r in runs):
        headers.insert(2, "version")
        for row, r in zip(rows, runs, strict=True):
            row.insert(2, r.version or "-")
    if any(r.queue for r in runs):
        at = headers.index("status") + 1
        headers.insert(at, "queue")
        for row, r in zip(rows, runs, strict=True):
            row.insert(at, _queue_text(r) if r.queue else "-")
    return _table(headers, rows)


async def _schedules(engine: Engine, args: argparse.Namespace) -> tuple[Any, str]:
    """``pikku-mongo schedules ...``: list them, or pause, resume or delete one."""
    action = args.schedule_action
    if action == "list":
        schedules = await engine.list_schedules()
        rows = [
            [
                s.name,
                s.workflow,
                f"cron {s.cron}" if s.cron is not None else f"every {s.every:g}s",
                s.timezone,
                "yes" if s.paused else "no",
                f"{s.next_fire_at:%Y-%m-%d %H:%M:%S}Z",
            ]
            for s in schedules
        ]
        headers = ["schedule", "workflow", "timing", "timezone", "paused", "next fire (UTC)"]
        return [_jsonable(s) for s in schedules], _table(headers, rows)
    name = args.name
    if action == "delete":
        await engine.delete_schedule(name)
        return {"name": name, "deleted": True}, f"schedule {name} deleted"
    if action == "trigger":
        run_id = await engine.trigger_schedule(name)
        return {"name": name, "run_id": run_id}, f"schedule {name} fired: run {run_id}"
    if action == "pause":
        await engine.pause_schedule(name)
    else:
        await engine.resume_schedule(name)
    paused = action == "pause"
    return {"name": name, "paused": paused}, f"schedule {name} {'paused' if paused else 'resumed'}"
