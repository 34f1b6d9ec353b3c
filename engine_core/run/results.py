"""What ``engine.result`` returns for a run that ended, or raises."""

from __future__ import annotations

from typing import Any

from engine_core.codecs.sealing import check_decoded
from engine_core.errors import (
    NonDeterminismError,
    WorkflowDeadlineExceededError,
    WorkflowRunCancelledError,
    WorkflowRunFailedError,
)
from engine_core.records import FAILED_ENDINGS, RunRecord


def diverged(run: RunRecord) -> bool:
    """Whether ``run`` was suspended because its code no longer replays its record."""
    return run.status == "suspended" and (run.error or {}).get("type") == "NonDeterminismError"


def outcome(run: RunRecord) -> Any:
    """The output of a completed run; the error of one that failed or was cancelled, or
    (``always_replay``: see ``engine.result``) was suspended for diverging
    (:class:`~engine_core.CodecError` for one this process cannot decode)."""
    check_decoded(run.output, run.error)
    error = run.error or {}
    if diverged(run):
        raise NonDeterminismError(
            f"run {run.run_id!r} was suspended: {error.get('message', 'it diverged')}",
            **{k: str(error.get(k) or "") for k in ("step", "recorded", "found", "reason")},
        )
    message = str(error.get("message") or f"run {run.run_id!r} ended {run.status}")
    if run.status in FAILED_ENDINGS:
        raise WorkflowRunFailedError(
            f"run {run.run_id!r} ended {run.status}: {message}", run_id=run.run_id, error=run.error
        )
    if run.status == "cancelled" and error.get("type") == "WorkflowDeadlineExceededError":
        raise WorkflowDeadlineExceededError(
            f"run {run.run_id!r} was cancelled: {message}", run_id=run.run_id, error=run.error
        )
    if run.status == "cancelled":
        raise WorkflowRunCancelledError(
            f"run {run.run_id!r} was cancelled: {message}", run_id=run.run_id, error=run.error
        )
    return run.output
