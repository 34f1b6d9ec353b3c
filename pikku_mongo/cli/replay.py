"""``pikku-mongo replay-check --app MODULE:ATTR [--workflow W]``: replay the stored runs
against the app's code, writing nothing, and exit 1 when any would diverge (for a deploy
pipeline: run it with the new build before it ships).

``MODULE:ATTR`` names the app's :class:`~engine_core.Engine` (or a function without
arguments that returns one), with its workflows registered and its store configured, as
the app itself would make it; the current directory is importable, as for ``uvicorn``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

from engine_core import Engine, ReplayReport


def load_engine(spec: str) -> Engine:
    """The engine ``MODULE:ATTR`` names."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(
            f"--app must be MODULE:ATTR, such as myapp.workflows:engine (got {spec!r})"
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    if not isinstance(target, Engine) and callable(target):
        target = target()
    if not isinstance(target, Engine):
        raise TypeError(f"{spec} is a {type(target).__name__}, not an engine_core.Engine")
    return target


def render(report: ReplayReport) -> str:
    """The report as text: how many runs were checked, and each that would diverge."""
    lines = [f"replayed {report.checked} run(s): {len(report.diverged)} would diverge"]
    for d in report.diverged:
        lines += [
            f"- run {d.run_id}, step {d.step!r}: {d.reason}",
            f"    recorded {d.recorded}",
            f"    the code {d.found}",
        ]
    return "\n".join(lines)


async def replay_check_command(args: argparse.Namespace) -> tuple[Any, str, int]:
    """Run the check; (JSON data, text, exit code: 1 when a run would diverge)."""
    engine = load_engine(args.app)
    try:
        report = await engine.replay_check(
            workflow=args.workflow, limit=args.limit, include_ended=args.include_ended
        )
    finally:
        await engine.store.close()
    data = {
        "checked": report.checked,
        "diverged": [
            {
                "run_id": d.run_id,
                "step": d.step,
                "recorded": d.recorded,
                "found": d.found,
                "reason": d.reason,
            }
            for d in report.diverged
        ],
    }
    return data, render(report), 1 if report.diverged else 0


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``replay-check`` and its options to the command line's ``sub`` commands."""
    check = sub.add_parser(
        "replay-check",
        parents=[common],
        help="replay stored runs against an app's code; exit 1 if any would diverge",
    )
    check.add_argument("--app", required=True, help="MODULE:ATTR of the app's Engine")
    check.add_argument("--workflow", help="only the runs of this workflow")
    check.add_argument("--limit", type=int, default=1000, help="at most this many runs (1000)")
    check.add_argument(
        "--include-ended", action="store_true", help="check runs that have ended too"
    )
