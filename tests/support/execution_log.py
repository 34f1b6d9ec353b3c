"""The side-effect log of step executions, shared by the fault and chaos workloads:
every execution appends one JSON line (its kind, process, time, and its run, step and
attempt) to the file at ``LOG_PATH["path"]``, so a test counts how often each step
really ran, whatever the store says."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from engine_core import current_step

#: Where :func:`record` appends; a worker sets it from its command line, a test's
#: fixture for the steps of its own process.
LOG_PATH = {"path": ""}


def record(kind: str, **extra: Any) -> None:
    """Append one line to the log (with the current step's run, step and attempt)."""
    info = current_step()
    line = {"kind": kind, "pid": os.getpid(), "t": time.time(), **extra}
    if info is not None:
        line.update(run=info.run_id, step=info.step, attempt=info.attempt)
    fd = os.open(LOG_PATH["path"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


def read_log(path: str) -> list[dict[str, Any]]:
    """Every line of the log at ``path`` (none if it is not there yet)."""
    if not os.path.exists(path):
        return []
    with open(path) as log:
        return [json.loads(line) for line in log if line.strip()]
