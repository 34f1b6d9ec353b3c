"""What the runs an engine drives wait on: only time, or something else too.

A virtual clock skips ahead (``engine_core.testing.VirtualClock``, inside
``engine.result``) only while every run the engines on it drive waits only on time: a
sleep, a retry delay, a delayed start, a schedule, or a wait with a timeout (an event's;
a child run is a run of its own, judged as one). A run waiting on an event with no
timeout, or on a dispatched step no worker here claims, waits on the world: skipping
ahead would only fire the timeouts of the others before it came. Read from the store
(every live run and its steps, a few reads per run): a test's few runs, never a fleet's.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime

from engine_core.common.journal import merged_steps
from engine_core.records import ACTIVE, StepRecord
from engine_core.store import Store

#: Runs one listing reads at most.
PAGE = 1000
#: Steps that wait only on time, or on a run of their own (a child).
_TIME_KINDS = ("sleep", "child")


@dataclass
class Waiting:
    """What the live runs wait on: ``owed``, runs owed a pass nobody took yet; ``other``,
    whether one waits on something other than time."""

    owed: list[str] = field(default_factory=list)
    other: bool = False


async def what_runs_wait_on(store: Store, workflows: Collection[str], now: datetime) -> Waiting:
    """What the live runs of ``workflows`` (``running`` or ``compensating``) wait on at
    ``now``; suspended and queued runs wait on nothing the clock could bring nearer but
    their delay or their queue, both timers of their own."""
    waiting = Waiting()
    for status in ACTIVE:
        after: str | None = None
        while True:
            page = await store.list_runs(workflow=None, status=status, limit=PAGE, after=after)
            for run in page:
                if run.workflow not in workflows:
                    continue
                if run.pending_pass:
                    waiting.owed.append(run.run_id)
                    continue
                steps = merged_steps(run, await store.load_steps(run.run_id))
                if any(_waits_on_more_than_time(step, now) for step in steps):
                    waiting.other = True
            if len(page) < PAGE:
                break
            after = page[-1].run_id
    return waiting


def _waits_on_more_than_time(step: StepRecord, now: datetime) -> bool:
    """Whether ``step`` holds its run for something the clock cannot bring: work in
    progress, a wait with no timeout, a job nobody claimed when it fell due."""
    if step.status in ("pending", "running"):
        return True
    if step.status != "scheduled" or step.kind in _TIME_KINDS:
        return False
    return step.due_at is None or step.due_at <= now or step.halted
