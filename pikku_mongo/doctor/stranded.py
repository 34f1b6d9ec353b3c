"""Runs that no live worker can drive: their workflow is registered on no serving
engine (the "stranded runs" of ``doctor`` and the dashboard's Workers page).

Read through the Engine API only (so it works on any store): the live workers (1 read),
the workflows that have runs (1 read) and, for each workflow no live worker serves, its
runs counted by status (1 read each). Workflow versions do not exist yet; queued
dispatched steps of a step function no live worker registers are ``doctor``'s to find
(:func:`pikku_mongo.doctor.fleet.stranded_jobs`), not the dashboard's.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine_core import Engine, Worker

#: The statuses of runs that wait for a worker to drive them.
DRIVEN = ("running", "queued", "compensating")


@dataclass(frozen=True)
class Stranded:
    """Runs of ``workflow`` waiting for a worker, and what no live worker registers."""

    workflow: str
    runs: int
    missing: str


async def stranded_runs(engine: Engine, workers: list[Worker] | None = None) -> list[Stranded]:
    """Per workflow, the runs waiting to be driven that no live worker serves."""
    live = await engine.list_workers() if workers is None else workers
    served = {w for worker in live for w in worker.workflows}
    found = []
    for workflow in await engine.list_workflows():
        if workflow in served:
            continue
        counts = await engine.count_runs(workflow)
        waiting = sum(counts.get(status, 0) for status in DRIVEN)
        if waiting:
            found.append(Stranded(workflow, waiting, f"workflow {workflow!r}"))
    return found
