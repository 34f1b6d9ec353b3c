"""``pikku-mongo runs fork|cancel|retry``: one run by id, or every run a filter matches.

    pikku-mongo runs fork RUN [--from STEP] [--new-run-id ID] [--keep-idempotency-keys]
    pikku-mongo runs fork|cancel|retry --workflow W [--status S] [--since T]
                                       [--before T] [--error-type E] [--dry-run]

``runs fork RUN`` prints which steps the fork copies and which run again (a step whose
compensation ran is never copied). ``runs retry --status`` takes ``failed``, the one
status a retry takes. With a filter, ``--dry-run`` prints how many runs match and the
first ids, changing nothing; without it the command acts on them (a page at a time) and
prints what it did.
Times are ISO 8601 (``2026-12-03T10:00:00Z``; UTC when no offset is given).
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from engine_core import Engine, ForkPlan
from engine_core.run.bulk import BulkReport

#: Ids a bulk command prints.
SHOWN = 20


def add_arguments(action: argparse.ArgumentParser, name: str) -> None:
    """The arguments of ``runs NAME`` (fork, cancel or retry): a run id or a filter."""
    action.add_argument("run_id", nargs="?", help="the run (or pass a filter instead)")
    bulk = action.add_argument_group("or every run a filter matches")
    bulk.add_argument("--workflow")
    if name == "retry":
        bulk.add_argument("--status", help="only runs in this status: failed (the default)")
    else:
        bulk.add_argument("--status", help="only runs in this status")
    bulk.add_argument("--since", type=_moment, help="created at or after (ISO 8601)")
    bulk.add_argument("--before", type=_moment, help="created before (ISO 8601)")
    bulk.add_argument(
        "--error-type", help="the run's error type, or the exception type of its failed step"
    )
    bulk.add_argument(
        "--dry-run", action="store_true", help="print the count and the first ids only"
    )
    if name == "fork":
        action.add_argument("--from", dest="from_step", help="the step to run anew")
        action.add_argument("--new-run-id", help="the fork's id (the fork starts once)")
        action.add_argument(
            "--keep-idempotency-keys",
            action="store_true",
            help="steps that run again keep the original's idempotency keys",
        )


def _moment(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 time (e.g. 2026-12-03T10:00:00Z)"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def is_bulk(args: argparse.Namespace) -> bool:
    """Whether ``args`` name a filter; a run id and a filter together are refused."""
    named = [
        getattr(args, n, None) for n in ("workflow", "status", "since", "before", "error_type")
    ]
    bulk = any(v is not None for v in named)
    if bulk and args.run_id is not None:
        raise ValueError("pass a run id or a filter, not both")
    if not bulk and args.run_id is None:
        raise ValueError(f"runs {args.action} needs a run id or a filter (--workflow, ...)")
    if not bulk and args.dry_run:
        raise ValueError("--dry-run goes with a filter")
    return bulk


async def act_on_one(engine: Engine, args: argparse.Namespace) -> tuple[Any, str] | None:
    """``runs fork RUN``: the fork's id; cancel and retry of one run are the caller's."""
    if args.action != "fork":
        return None
    plan = await engine.fork_plan(args.run_id, from_step=args.from_step)
    fork = await engine.fork(
        args.run_id,
        from_step=args.from_step,
        new_run_id=args.new_run_id,
        keep_idempotency_keys=args.keep_idempotency_keys,
    )
    data = {
        "run_id": args.run_id,
        "fork": fork,
        "from_step": plan.from_step,
        "copied": plan.copied,
        "run_again": plan.run_again,
        "compensated": plan.compensated,
    }
    return data, f"run {args.run_id} forked: run {fork}\n" + fork_plan_text(plan)


def fork_plan_text(plan: ForkPlan) -> str:
    """Which steps a fork copies and which run again, one line each."""
    again = [
        f"{key} (its compensation ran)" if key in plan.compensated else key
        for key in plan.run_again
    ]
    return (
        f"from step: {plan.from_step or '-'}\n"
        f"copied:    {', '.join(plan.copied) or 'none'}\n"
        f"run again: {', '.join(again) or 'none'}"
    )


async def act_on_many(engine: Engine, args: argparse.Namespace) -> tuple[Any, str]:
    """``runs fork|cancel|retry`` with a filter."""
    where: dict[str, Any] = {
        "workflow": args.workflow,
        "created_since": args.since,
        "created_before": args.before,
        "error_type": args.error_type,
        "dry_run": args.dry_run,
    }
    if args.action == "fork":
        report = await engine.fork_many(
            **where,
            status=args.status,
            from_step=args.from_step,
            keep_idempotency_keys=args.keep_idempotency_keys,
        )
    elif args.action == "cancel":
        report = await engine.cancel_many(**where, status=args.status, compensate=args.compensate)
    else:
        report = await engine.retry_many(**where, status=args.status)
    return _report(args.action, report)


def _report(action: str, report: BulkReport) -> tuple[Any, str]:
    data = {
        "matched": report.matched,
        "done": report.done,
        "skipped": report.skipped,
        "dry_run": report.dry_run,
        "runs": [{"run_id": r, "new_run_id": n} for r, n in report.sample],
        "errors": [{"run_id": r, "error": e} for r, e in report.errors],
    }
    shown = report.sample[:SHOWN]
    if report.dry_run:
        lines = [f"{report.matched} run(s) match; nothing done (--dry-run)"]
        lines += [f"  {r}" for r, _ in shown]
    else:
        done = {"fork": "forked", "cancel": "cancelled", "retry": "retried"}[action]
        lines = [f"{report.matched} run(s) matched, {report.done} {done}, {report.skipped} skipped"]
        lines += [f"  {r}" + (f" -> {n}" if n else "") for r, n in shown]
        lines += [f"  skipped {r}: {e}" for r, e in report.errors[:SHOWN]]
    if report.matched > len(shown) and (report.dry_run or report.done > len(shown)):
        lines.append(f"  ... ({report.matched - len(shown)} more)")
    return data, "\n".join(lines)
