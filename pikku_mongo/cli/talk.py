"""``pikku-mongo runs update`` and ``runs value``: talk to a running run from the command
line (docs/guides/values-and-updates.md), as a client with no workflow code."""

from __future__ import annotations

import argparse
import json
from typing import Any

from engine_core import Engine

#: How long ``runs update`` and ``runs value`` wait by default (seconds).
DEFAULT_WAIT_S = 30.0


def add_parsers(actions: Any, common: argparse.ArgumentParser) -> None:
    """Add ``runs update`` and ``runs value`` to the ``runs`` command's ``actions``."""
    update = actions.add_parser(
        "update", parents=[common], help="send a run an update and print its answer"
    )
    update.add_argument("run_id")
    update.add_argument("name", help="the update's name (what ctx.wait_for_update waits for)")
    update.add_argument("--payload", default="null", help="the payload, as JSON (default null)")
    update.add_argument(
        "--update-id", help="the update's id: a retry with the same id gets the first answer"
    )
    _add_wait(update)
    value = actions.add_parser(
        "value", parents=[common], help="print a run's latest value of a key"
    )
    value.add_argument("run_id")
    value.add_argument("key", help="the value's key (what ctx.set_value wrote)")
    _add_wait(value)


def _add_wait(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--wait",
        type=float,
        default=DEFAULT_WAIT_S,
        metavar="SECONDS",
        help=f"how long to wait for the answer or a first value (default {DEFAULT_WAIT_S:g})",
    )


def _payload(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f'--payload is not JSON ({exc}): pass e.g. \'{{"to": "x"}}\'') from exc


async def talk(engine: Engine, args: argparse.Namespace) -> tuple[Any, str]:
    """``runs update``: the answer (a rejection raises its ``UpdateRejectedError``: one
    line, exit code 1); ``runs value``: the value. Each as JSON data and as text."""
    if args.action == "value":
        found = await engine.get_value(args.run_id, args.key, timeout=args.wait)
        data = {"run_id": args.run_id, "key": args.key, "value": found}
        return data, json.dumps(found, default=str)
    payload = _payload(args.payload)
    answer = await engine.update(
        args.run_id, args.name, payload, update_id=args.update_id, timeout=args.wait
    )
    data = {"run_id": args.run_id, "update": args.name, "answer": answer}
    return data, json.dumps(answer, default=str)
