"""The ``pikku-mongo`` command line's arguments: every command, its options and help."""

from __future__ import annotations

import argparse
from importlib import metadata
from typing import Any, get_args

import pikku_mongo.cli.repair as repair_cli
from engine_core.common.options import ORDERS
from engine_core.records import RunState
from pikku_mongo.cli.replay import add_parser as add_replay_check
from pikku_mongo.cli.tail import add_parser as add_tail
from pikku_mongo.cli.talk import add_parsers as add_talk

#: The statuses ``runs list --status`` accepts.
RUN_STATUSES: tuple[str, ...] = tuple(get_args(RunState))
URI_HELP = "the MongoDB URI, with the database in its path (default: MONGODB_URI)"


def _version() -> str:
    try:
        return metadata.version("pikku-mongo")
    except metadata.PackageNotFoundError:  # a checkout run without installing
        return "unknown"


def build_parser(description: str) -> argparse.ArgumentParser:
    """The parser of every command (``description``: the first line of the help)."""
    parser = argparse.ArgumentParser(prog="pikku-mongo", description=description)
    parser.add_argument("--version", action="version", version=f"pikku-mongo {_version()}")
    parser.add_argument("--uri", help=URI_HELP)
    # After the command too; SUPPRESS keeps a --uri given before it.
    with_uri = argparse.ArgumentParser(add_help=False)
    with_uri.add_argument("--uri", default=argparse.SUPPRESS, help=URI_HELP)
    common = argparse.ArgumentParser(add_help=False, parents=[with_uri])
    common.add_argument("--json", action="store_true", help="print JSON")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_store_commands(sub, common)
    _add_runs(sub, common)
    _add_fleet(sub, common)
    add_replay_check(sub, common)
    _add_ui(sub, with_uri)
    return parser


def _add_store_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    sub.add_parser("init", parents=[common], help="create the indexes")
    sub.add_parser("doctor", parents=[common], help="check the server, concerns, indexes and clock")
    sub.add_parser("shard-plan", parents=[common], help="print the commands that shard the store")
    sub.add_parser("recover", parents=[common], help="run one recovery pass")
    prune = sub.add_parser("prune", parents=[common], help="delete old finished runs")
    prune.add_argument("--older-than", required=True, help="age, such as 30d or 12h")


def _add_runs(sub: Any, common: argparse.ArgumentParser) -> None:
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
    add_talk(actions, common)


def _add_fleet(sub: Any, common: argparse.ArgumentParser) -> None:
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


def _add_ui(sub: Any, with_uri: argparse.ArgumentParser) -> None:
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
