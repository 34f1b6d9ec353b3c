"""Runs that no live worker will drive (the "stranded runs" of ``doctor``, the
dashboard's Workers page): their workflow is registered on no serving engine, or every
serving engine that registers it pins versions (``pin_versions=True``) and none serves
the run's version (a run started with no version, or an old one, into a pinned fleet).

Read through the Engine API only (so it works on any store): the live workers (1 read),
the workflows that have runs (1 read), for each workflow no live worker serves its runs
counted by status (1 read each), and for each workflow that only pinned workers serve,
its waiting runs listed a page at a time (without their steps, at most
:data:`MAX_LISTED` per status) to count them by version. Queued dispatched steps of a
step function no live worker registers are ``doctor``'s to find
(:func:`pikku_mongo.doctor.fleet.stranded_jobs`), not the dashboard's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from engine_core import Engine, RunStatus, Worker
from engine_core.fleet.registry import why_undriven

#: The statuses of runs that wait for a worker to drive them.
DRIVEN = ("running", "queued", "compensating")
#: The most runs of one status of one workflow read to count them by version.
MAX_LISTED = 10_000
_PAGE = 1000


@dataclass(frozen=True)
class Stranded:
    """Runs of ``workflow`` (of ``version``, when the fleet pins versions) waiting for a
    worker, and what no live worker serves (``missing``, in words)."""

    workflow: str
    runs: int
    missing: str
    version: str | None = None
    #: Whether the workflow is served, only not this version (by pinned workers).
    pinned_out: bool = False

    def describe(self) -> str:
        """One line: how many runs, and what no live worker serves."""
        if self.pinned_out:
            return f"{self.runs} run(s) of {self.missing}"
        return f"{self.runs} waiting for {self.missing} (registered on no live worker)"


async def why_stranded(engine: Engine, status: RunStatus) -> str | None:
    """Why no live worker will drive the run of ``status``, when it waits to be driven
    and none will (1 read of the registry of workers); else None."""
    if status.status not in DRIVEN:
        return None
    workers = await engine.list_workers()
    return why_undriven(status.workflow, status.version, workers)


async def stranded_runs(engine: Engine, workers: list[Worker] | None = None) -> list[Stranded]:
    """Per workflow (and version), the runs waiting to be driven that no live worker
    will drive."""
    live = await engine.list_workers() if workers is None else workers
    found = []
    for workflow in await engine.list_workflows():
        serving = [w for w in live if workflow in w.workflows]
        if not serving:
            counts = await engine.count_runs(workflow)
            waiting = sum(counts.get(status, 0) for status in DRIVEN)
            if waiting:
                found.append(Stranded(workflow, waiting, f"workflow {workflow!r}"))
        elif all(w.pinned for w in serving):
            for version, n in sorted((await _waiting_by_version(engine, workflow)).items(),
                                     key=lambda item: str(item[0])):  # fmt: skip
                reason = why_undriven(workflow, version, live)
                if reason is not None:
                    label = "no version" if version is None else f"version {version!r}"
                    missing = f"{label} of workflow {workflow!r} ({reason})"
                    found.append(Stranded(workflow, n, missing, version, pinned_out=True))
    return found


async def _waiting_by_version(engine: Engine, workflow: str) -> Counter[str | None]:
    """The waiting runs of ``workflow`` counted by version (at most :data:`MAX_LISTED`
    of each status read)."""
    counts: Counter[str | None] = Counter()
    for status in DRIVEN:
        after, read = None, 0
        while read < MAX_LISTED:
            page = await engine.list_runs(workflow, status, limit=_PAGE, after=after)
            counts.update(run.version for run in page)
            read += len(page)
            if len(page) < _PAGE:
                break
            after = page[-1].run_id
    return counts
