"""``pikku-mongo``: see and steer runs from a terminal. Reads ``--uri`` or ``MONGODB_URI``.

    pikku-mongo runs list [--workflow W] [--status S] [--version V] [--limit N] [--after ID]
                          [--order O]
    pikku-mongo runs show RUN_ID
    pikku-mongo runs tail RUN_ID [--stream KEY]
    pikku-mongo runs cancel RUN_ID [--compensate]
    pikku-mongo runs suspend RUN_ID | resume RUN_ID | retry RUN_ID
    pikku-mongo runs fork RUN_ID [--from STEP] [--new-run-id ID] [--keep-idempotency-keys]
    pikku-mongo runs fork|cancel|retry --workflow W [--status S] [--since T] [--before T]
                                       [--error-type E] [--dry-run]
    pikku-mongo queues list
    pikku-mongo workers list
    pikku-mongo schedules list | pause NAME | resume NAME | delete NAME | trigger NAME
    pikku-mongo recover
    pikku-mongo prune --older-than 30d
    pikku-mongo init
    pikku-mongo doctor
    pikku-mongo shard-plan
    pikku-mongo replay-check --app MODULE:ATTR [--workflow W] [--limit N] [--include-ended]
    pikku-mongo ui [--host 127.0.0.1] [--port 8642] [--token T] [--read-only] [--refresh S]
                   [--metrics]

Every command takes ``--uri URI`` (before or after the command) in place of
``MONGODB_URI``; ``pikku-mongo --version`` prints the version. Every command but ``ui``
takes ``--json``. Errors are one line on stderr, with exit code 1
(2 for bad usage). A server that does not answer fails a command within about
``SERVER_TIMEOUT_S`` seconds (unless the URI sets ``serverSelectionTimeoutMS`` itself).
``shard-plan`` prints the ``shardCollection`` commands for the URI's database (it asks
no server: the library never shards by itself). ``doctor`` exits 1 when a check fails;
``replay-check`` exits 1 when a stored run would diverge on the app's code (see
``pikku_mongo.replay_cli``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import Any, get_args

from pymongo.errors import ConnectionFailure

from engine_core import Engine, EngineError
from engine_core.durations import parse_duration
from engine_core.options import ORDERS
from engine_core.records import RunState
from pikku_mongo import repair_cli
from pikku_mongo.cli_text import (
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
from pikku_mongo.doctor_shards import shard_plan
from pikku_mongo.errors import ServerUnreachableError
from pikku_mongo.replay_cli import add_parser as add_replay_check
from pikku_mongo.replay_cli import replay_check_command
from pikku_mongo.server import ensure_reachable, short_reason
from pikku_mongo.shard_keys import shard_commands
from pikku_mongo.store import MongoStore, _database_name, _redact
from pikku_mongo.tail_cli import add_parser as add_tail
from pikku_mongo.tail_cli import tail

#: The statuses ``runs list --status`` accepts.
RUN_STATUSES: tuple[str, ...] = tuple(get_args(RunState))

#: The collection prefix of the stores the CLI opens (``MongoStore``'s default).
PREFIX = "pikku_"
NO_URI = "pass --uri or set MONGODB_URI (with a database name in its path)"
URI_HELP = "the MongoDB URI, with the database in its path (default: MONGODB_URI)"
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


async def _connect(uri: str) -> MongoStore:
    """A store for one command, once the server answered a ping (not retried: an
    unreachable server is one line, at once)."""
    store = MongoStore.from_uri(uri, **_client_options(uri))
    try:
        await ensure_reachable(store.database, _redact(uri), SERVER_TIMEOUT_S + 1)
    except BaseException:
        await store.close()
        raise
    return store


async def _doctor(uri: str) -> tuple[dict[str, Any], str, int]:
    store = await _connect(uri)
    try:
        report = await diagnose(store)
    finally:
        await store.close()
    return report.to_json(), render(report), 0 if report.ok else 1


def _shard_plan(uri: str) -> tuple[Any, str]:
    database = _database_name(uri)
    if not database:
        raise ValueError(f"the URI {_redact(uri)!r} names no database: {NO_URI}")
    commands = list(shard_commands(database, PREFIX))
    return {"commands": commands}, shard_plan(database, PREFIX)


async def _run(args: argparse.Namespace, uri: str) -> Any:
    store = await _connect(uri)
    engine = Engine(store)
    try:
        if args.command == "init":
            await store.init()
            return {"initialised": True}, "indexes created"
        if args.command == "recover":
            report = await engine.recover()
            data = {
                "skipped": report.skipped,
                "woken": report.woken,
                "rearmed": report.rearmed,
                "redispatched": report.redispatched,
                "resumed": report.resumed,
                "runs": report.runs,
            }
            text = (
                "another instance holds the recovery lease; nothing done"
                if report.skipped
                else f"recovery: {report.summary()}"
            )
            return data, text
        if args.command == "prune":
            deleted = await engine.delete_finished_runs(args.older_than)
            return {"deleted": deleted}, f"deleted {deleted} finished run(s)"
        if args.command == "schedules":
            return await _schedules(engine, args)
        if args.command == "queues":
            return await _queues(engine)
        if args.command == "workers":
            return await _workers(engine)
        action = args.action
        if action == "list":
            runs = await engine.list_runs(
                workflow=args.workflow,
                status=args.status,
                limit=args.limit,
                after=args.after,
                version=args.version,
                order=args.order,
            )
            headers = ["run", "workflow", "status", "created", "updated"]
            rows = [
                [r.run_id, r.workflow, r.status, _time(r.created_at), _time(r.updated_at)]
                for r in runs
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
            text = _table(headers, rows)
            if len(runs) == args.limit:
                order = "" if args.order == "newest" else f" --order {args.order}"
                text += f"\n(more: --after {runs[-1].run_id}{order})"
            return [_listed(r) for r in runs], text
        if action == "show":
            return await _show(engine, args.run_id)
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
    finally:
        await store.close()


async def _tail(args: argparse.Namespace, uri: str) -> int:
    store = await _connect(uri)
    try:
        return await tail(store, args.run_id, args.stream, args.json)
    finally:
        await store.close()


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


def _older_than(value: str) -> float:
    """``prune --older-than``, its errors naming the option as typed."""
    return parse_duration(value, what="--older-than")


def _version() -> str:
    try:
        return metadata.version("pikku-mongo")
    except metadata.PackageNotFoundError:  # a checkout run without installing
        return "unknown"


def _parser() -> argparse.ArgumentParser:
    # Help is plain text: the docstring's RST literals lose their backticks.
    parser = argparse.ArgumentParser(
        prog="pikku-mongo", description=__doc__.split("\n")[0].replace("``", "")
    )
    parser.add_argument("--version", action="version", version=f"pikku-mongo {_version()}")
    parser.add_argument("--uri", help=URI_HELP)
    # After the command too; SUPPRESS keeps a --uri given before it.
    with_uri = argparse.ArgumentParser(add_help=False)
    with_uri.add_argument("--uri", default=argparse.SUPPRESS, help=URI_HELP)
    common = argparse.ArgumentParser(add_help=False, parents=[with_uri])
    common.add_argument("--json", action="store_true", help="print JSON")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("init", parents=[common], help="create the indexes")
    sub.add_parser("doctor", parents=[common], help="check the server, concerns, indexes and clock")
    sub.add_parser("shard-plan", parents=[common], help="print the commands that shard the store")
    sub.add_parser("recover", parents=[common], help="run one recovery pass")
    prune = sub.add_parser("prune", parents=[common], help="delete old finished runs")
    prune.add_argument("--older-than", required=True, help="age, such as 30d or 12h")
    runs = sub.add_parser("runs", help="list, show and steer runs")
    actions = runs.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", parents=[common], help="list runs")
    listing.add_argument("--workflow")
    listing.add_argument(
        "--status", choices=RUN_STATUSES, metavar="STATUS", help=f"one of {', '.join(RUN_STATUSES)}"
    )
    listing.add_argument("--version", help="only runs started with this version= label")
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--after", help="the last run id of the previous page")
    listing.add_argument(
        "--order",
        choices=ORDERS,
        default="newest",
        help="newest first (the default), oldest first, or by run id",
    )
    for name, text in (
        ("show", "steps, attempts and timeline of a run"),
        ("cancel", "cancel a run"),
        ("suspend", "suspend a run"),
        ("resume", "resume a suspended run"),
        ("retry", "give a failed run a new pass from its failed step"),
        ("fork", "a new run reusing the steps finished before a step"),
    ):
        action = actions.add_parser(name, parents=[common], help=text)
        if name in ("fork", "cancel", "retry"):
            repair_cli.add_arguments(action, name)
        else:
            action.add_argument("run_id")
        if name == "cancel":
            action.add_argument(
                "--compensate", action="store_true", help="run the compensations of finished steps"
            )
    add_tail(actions, common)
    queues = sub.add_parser("queues", help="the queues and their figures")
    queue_actions = queues.add_subparsers(dest="queue_action", required=True)
    queue_actions.add_parser(
        "list", parents=[common], help="queued, active and admitted runs of each queue"
    )
    workers = sub.add_parser("workers", help="the serving engines of the fleet")
    worker_actions = workers.add_subparsers(dest="worker_action", required=True)
    worker_actions.add_parser("list", parents=[common], help="the live workers and what they serve")
    schedules = sub.add_parser("schedules", help="list, pause, resume and delete schedules")
    schedule_actions = schedules.add_subparsers(dest="schedule_action", required=True)
    schedule_actions.add_parser("list", parents=[common], help="list the schedules")
    for name, text in (
        ("pause", "stop a schedule firing"),
        ("resume", "let a paused schedule fire again, from its next fire"),
        ("delete", "delete a schedule (its runs stay)"),
        ("trigger", "start one run of a schedule now, paused or not"),
    ):
        action = schedule_actions.add_parser(name, parents=[common], help=text)
        action.add_argument("name")
    add_replay_check(sub, common)
    ui = sub.add_parser(
        "ui", parents=[with_uri], help="serve the web dashboard (needs the ui extra)"
    )
    ui.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    ui.add_argument("--port", type=int, default=8642, help="port to listen on (8642)")
    ui.add_argument(
        "--token",
        help="require this token (Bearer header or login form); needed beyond loopback. "
        "PIKKU_MONGO_UI_TOKEN keeps it out of the process list",
    )
    ui.add_argument("--read-only", action="store_true", help="offer no actions")
    ui.add_argument(
        "--metrics", action="store_true", help="serve /metrics (needs the metrics extra)"
    )
    ui.add_argument("--refresh", type=float, default=5.0, help="seconds between live refreshes (5)")
    ui.add_argument(
        "--trace-url", help="link to each run's trace, e.g. https://jaeger/trace/{trace_id}"
    )
    return parser


def _one_line(exc: BaseException) -> str:
    """An error as one line: a driver's topology description is cut off."""
    text = str(exc).split(", Timeout:", 1)[0].splitlines()
    return text[0] if text else type(exc).__name__


def _ui(args: argparse.Namespace) -> int:
    """``pikku-mongo ui``: checks come first, so a refusal needs no server."""
    try:
        from pikku_mongo.dashboard.serve import RefusedToServe, check_bind, serve
    except ImportError as exc:
        print(
            f"pikku-mongo: the dashboard needs the ui extra ({exc.name or exc} is missing): "
            "pip install 'pikku-mongo[ui]'",
            file=sys.stderr,
        )
        return 1
    token = args.token or os.environ.get("PIKKU_MONGO_UI_TOKEN") or None
    uri = args.uri or os.environ.get("MONGODB_URI")
    try:
        check_bind(args.host, token)
        if not uri:
            raise RefusedToServe(NO_URI)
        asyncio.run(
            serve(
                uri,
                host=args.host,
                port=args.port,
                token=token,
                read_only=args.read_only,
                trace_url=args.trace_url,
                refresh_seconds=args.refresh,
                metrics=args.metrics,
            )
        )
    except KeyboardInterrupt:
        return 0
    except Exception as exc:  # one line, whatever the driver or the server raises
        plain = RefusedToServe | ValueError | ServerUnreachableError
        name = "" if isinstance(exc, plain) else f"{type(exc).__name__}: "
        print(f"pikku-mongo: {name}{_one_line(exc)}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "ui":
        return _ui(args)
    uri = getattr(args, "uri", None) or os.environ.get("MONGODB_URI")
    if not uri and args.command != "replay-check":  # the app's engine has its own store
        return _failed(args, NO_URI)
    uri = uri or ""
    code = 0
    try:
        if args.command == "prune":  # checked before any server is asked
            args.older_than = _older_than(args.older_than)
        if args.command == "replay-check":
            data, text, code = asyncio.run(replay_check_command(args))
        elif args.command == "doctor":
            data, text, code = asyncio.run(_doctor(uri))
        elif args.command == "shard-plan":
            data, text = _shard_plan(uri)
        elif args.command == "runs" and args.action == "tail":
            return asyncio.run(_tail(args, uri))  # printed as the entries come
        else:
            data, text = asyncio.run(_run(args, uri))
    except ServerUnreachableError as exc:
        return _failed(args, str(exc))
    except ConnectionFailure as exc:  # the server went away in the middle
        reason = short_reason(exc)
        return _failed(args, f"lost the MongoDB server at {_redact(uri)} ({reason})")
    except (EngineError, ValueError, TypeError, OSError) as exc:
        return _failed(args, _flat(str(exc)))
    except Exception as exc:  # a one-line error for anything the driver raises
        return _failed(args, f"{type(exc).__name__}: {_flat(short_reason(exc))}")
    print(json.dumps(data, indent=2) if args.json else text)
    return code


def _failed(args: argparse.Namespace, message: str) -> int:
    """One line on stderr, exit code 1; ``doctor --json`` also prints its report, every
    check failed, on stdout (a monitor reading it gets JSON whatever happened)."""
    print(f"pikku-mongo: {message}", file=sys.stderr)
    if args.command == "doctor" and args.json:
        check = {"check": "server", "status": "fail", "detail": message}
        report = {"ok": False, "failures": 1, "warnings": 0, "error": message, "checks": [check]}
        print(json.dumps(report, indent=2))
    return 1


def _flat(text: str) -> str:
    return " ".join(text.split())


if __name__ == "__main__":
    raise SystemExit(main())
