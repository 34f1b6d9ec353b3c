"""Waiting in tests for a run to reach a state, by polling its status (never by sleeping
a fixed time, which a loaded machine outlasts)."""

from __future__ import annotations

import asyncio
import contextlib
import time

from engine_core import Engine, RunStatus
from engine_core.errors import RunNotFoundError


async def wait_step(engine: Engine, run_id: str, step: str, status: str, limit: float = 30) -> None:
    """Until step ``step`` of ``run_id`` has ``status`` (a run not started yet is waited for)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        with contextlib.suppress(RunNotFoundError):  # a child not started yet
            steps = (await engine.status(run_id)).steps
            if step in steps and steps[step].status == status:
                return
        await asyncio.sleep(0.05)
    raise AssertionError(f"step {step!r} of {run_id} never reached {status!r}")


async def reaches(engine: Engine, run_id: str, step: str, limit: float = 30.0) -> None:
    """Until the run has a record of ``step``, whatever its status."""
    deadline = time.monotonic() + limit
    while step not in (await engine.status(run_id)).steps:
        assert time.monotonic() < deadline, f"{run_id} never reached {step!r}"
        await asyncio.sleep(0.02)


async def wait_run(engine: Engine, run_id: str, status: str, limit: float = 30) -> RunStatus:
    """Until the run has ``status``; its status then."""
    deadline = time.monotonic() + limit
    while (found := await engine.status(run_id)).status != status:
        assert time.monotonic() < deadline, f"run {run_id} never became {status!r}: {found}"
        await asyncio.sleep(0.02)
    return found
