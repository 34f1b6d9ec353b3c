"""``pikku-mongo``: see and steer runs from a terminal. Reads ``--uri`` or ``MONGODB_URI``.

    pikku-mongo runs list [--workflow W] [--status S] [--version V] [--limit N] [--after ID]
                          [--order O]
    pikku-mongo runs show RUN_ID
    pikku-mongo runs tail RUN_ID [--stream KEY]
    pikku-mongo runs update RUN_ID NAME [--payload JSON] [--update-id ID] [--wait SECONDS]
    pikku-mongo runs value RUN_ID KEY [--wait SECONDS]
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
``SERVER_TIMEOUT_S`` seconds (:mod:`pikku_mongo.cli.commands`; unless the URI sets
``serverSelectionTimeoutMS`` itself).
``shard-plan`` prints the ``shardCollection`` commands for the URI's database (it asks
no server: the library never shards by itself). ``doctor`` exits 1 when a check fails;
``replay-check`` exits 1 when a stored run would diverge on the app's code (see
``pikku_mongo.cli.replay``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from pymongo.errors import ConnectionFailure

from engine_core import EngineError
from engine_core.codecs.sealing import showing_undecodable
from engine_core.common.durations import parse_duration
from pikku_mongo.cli.commands import doctor, run_command, tail_command
from pikku_mongo.cli.parser import build_parser
from pikku_mongo.cli.replay import replay_check_command
from pikku_mongo.doctor.shards import shard_plan
from pikku_mongo.errors import ServerUnreachableError
from pikku_mongo.wire.server import short_reason
from pikku_mongo.wire.shard_keys import shard_commands
from pikku_mongo.wire.uri import database_name, redact

#: The collection prefix of the stores the CLI opens (``MongoStore``'s default).
PREFIX = "pikku_"
NO_URI = "pass --uri or set MONGODB_URI (with a database name in its path)"


def _shard_plan(uri: str) -> tuple[Any, str]:
    database = database_name(uri)
    if not database:
        raise ValueError(f"the URI {redact(uri)!r} names no database: {NO_URI}")
    commands = list(shard_commands(database, PREFIX))
    return {"commands": commands}, shard_plan(database, PREFIX)


def _older_than(value: str) -> float:
    """``prune --older-than``, its errors naming the option as typed."""
    return parse_duration(value, what="--older-than")


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
    """The ``pikku-mongo`` command (``argv``: its arguments, default ``sys.argv[1:]``);
    returns its exit code."""
    # Help is plain text: the docstring's RST literals lose their backticks.
    args = build_parser(__doc__.split("\n")[0].replace("``", "")).parse_args(argv)
    if args.command == "ui":
        return _ui(args)
    uri = getattr(args, "uri", None) or os.environ.get("MONGODB_URI")
    if not uri and args.command != "replay-check":  # the app's engine has its own store
        return _failed(args, NO_URI)
    uri = uri or ""
    code = 0
    try:
        # A value this process cannot decode shows as "encrypted" (engine_core.codecs).
        with showing_undecodable():
            if args.command == "prune":  # checked before any server is asked
                args.older_than = _older_than(args.older_than)
            if args.command == "replay-check":
                data, text, code = asyncio.run(replay_check_command(args))
            elif args.command == "doctor":
                data, text, code = asyncio.run(doctor(uri))
            elif args.command == "shard-plan":
                data, text = _shard_plan(uri)
            elif args.command == "runs" and args.action == "tail":
                return asyncio.run(tail_command(args, uri))  # printed as the entries come
            else:
                data, text = asyncio.run(run_command(args, uri))
    except ServerUnreachableError as exc:
        return _failed(args, str(exc))
    except ConnectionFailure as exc:  # the server went away in the middle
        reason = short_reason(exc)
        return _failed(args, f"lost the MongoDB server at {redact(uri)} ({reason})")
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
