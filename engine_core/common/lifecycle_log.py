"""The lines a run's life writes to the ``engine_core`` logger, one call per event.

INFO when a run starts, ends (with its status) or is taken over by recovery; WARNING
when an attempt fails and will be retried, a lease or claim is lost, a pass diverges.
The run counters of :mod:`engine_core.metrics` are kept by the same calls.
Nothing at INFO per successful step. Every record carries ``run_id``, ``workflow``,
``step`` and ``trace_id`` as attributes (None when they do not apply), so a JSON
formatter picks them up, and each message is one line.
"""

from __future__ import annotations

import logging
from typing import Any

import engine_core.metrics as metrics
from engine_core.records import RunRecord
from engine_core.tracing import trace_id_of

log = logging.getLogger("engine_core.lifecycle")

#: A one-line summary of an error is cut to this many characters.
SUMMARY_LIMIT = 200


def one_line(text: object, limit: int = SUMMARY_LIMIT) -> str:
    """``text`` on one line (whitespace runs folded), cut to ``limit`` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def error_summary(error: dict[str, Any] | None) -> str:
    """``Type: message`` of a stored error, on one line."""
    if not error:
        return ""
    message = str(error.get("message", ""))
    if "step" in error:  # a step's failure says which step, how often and why itself
        return one_line(message)
    return one_line(f"{error.get('type') or 'Error'}: {message}")


def fields(
    run_id: str | None,
    workflow: str | None = None,
    step: str | None = None,
    traceparent: str | None = None,
) -> dict[str, Any]:
    """The record attributes of a line about a run (``extra=``)."""
    return {
        "run_id": run_id,
        "workflow": workflow,
        "step": step,
        "trace_id": trace_id_of(traceparent),
    }


def run_fields(run: RunRecord, step: str | None = None) -> dict[str, Any]:
    """The log fields of ``run`` (and of its ``step``, when given)."""
    traceparent = run.wire.get("traceparent") if isinstance(run.wire, dict) else None
    return fields(run.run_id, run.workflow, step, traceparent)


def run_started(run: RunRecord) -> None:
    """Log (INFO) and count that ``run`` started."""
    metrics.run_started(run.workflow)
    if not log.isEnabledFor(logging.INFO):
        return
    where = f" on queue {run.queue!r}" if run.queue is not None else ""
    parent = f" (child of run {run.parent_run_id})" if run.parent_run_id else ""
    version = f" version {run.version!r}" if run.version is not None else ""
    log.info(
        "run %s of workflow %r%s started%s%s",
        run.run_id,
        run.workflow,
        version,
        where,
        parent,
        extra=run_fields(run),
    )


def run_ended(run: RunRecord, status: str, error: dict[str, Any] | None) -> None:
    """Log (INFO, or WARNING when it failed) and count that ``run`` ended with ``status``."""
    metrics.run_ended(run.workflow, status, run.created_at)
    if not log.isEnabledFor(logging.INFO):
        return
    summary = error_summary(error) if status != "completed" else ""
    log.info(
        "run %s of workflow %r ended: %s%s",
        run.run_id,
        run.workflow,
        status,
        f" ({summary})" if summary else "",
        extra=run_fields(run, error.get("step") if error else None),
    )


def run_recovered(run: RunRecord, why: str) -> None:
    """Log (INFO) that recovery took ``run`` over, and ``why``."""
    log.info(
        "run %s of workflow %r taken over by recovery (%s)",
        run.run_id,
        run.workflow,
        why,
        extra=run_fields(run),
    )


def attempt_will_retry(
    run_id: str,
    workflow: str | None,
    step: str,
    traceparent: str | None,
    attempt: int,
    max_attempts: int,
    error: dict[str, Any],
    wait: float,
) -> None:
    """Log (WARNING) that an attempt failed with ``error`` and the step runs again in
    ``wait`` seconds."""
    log.warning(
        "run %s: step %r attempt %d of %d failed (%s); retrying in %.2f s",
        run_id,
        step,
        attempt,
        max_attempts,
        error_summary(error),
        wait,
        extra=fields(run_id, workflow, step, traceparent),
    )


def lost(what: str, extra: dict[str, Any] | None = None) -> None:
    """A lease or a claim was lost: its holder's writes will be fenced out."""
    log.warning(
        "lost %s; its holder's writes will be fenced out", what, extra=extra or fields(None)
    )


def pass_diverged(run: RunRecord, step: str | None, detail: str) -> None:
    """A pass's body no longer matches the steps recorded for its run (for the
    divergence check to call)."""
    metrics.diverged(run.workflow)
    log.warning(
        "run %s of workflow %r: the pass diverged from its recorded steps: %s",
        run.run_id,
        run.workflow,
        one_line(detail),
        extra=run_fields(run, step),
    )
