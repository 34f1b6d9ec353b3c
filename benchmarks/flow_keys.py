"""Q2: flow control per key on MongoStore (issue 43), commands counted.

- A debounced start: ``starts`` starts over ``keys`` debounce keys (the first start of
  a key opens its window and inserts its run, the others join it), by a client that
  serves nothing, one after another. Target: at most 2 commands per start.
- Admission from a queue ``depth`` runs deep over 1,000 keys with ``concurrency=100``,
  first come first served and with ``fairness="key"`` (:func:`benchmarks.admission.
  admission_rate`). Target: the fair queue costs at most 1.5 times the commands of the
  first-come queue per admitted run.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from benchmarks.admission import admission_rate
from benchmarks.common import FULL, Measurement, Sizes, Summary, measure_parts, open_store
from benchmarks.numbers import num
from benchmarks.results import Results
from engine_core import Engine, WorkflowContext

WORKFLOW = "bench-debounced"
#: Keys of the fair-queue variants, and the queue's concurrency (as Q1's limited one).
KEYS = 1_000
CONCURRENCY = 100
#: Starts per debounce key.
STARTS_PER_KEY = 10


async def debounced_starts(uri: str, starts: int) -> Measurement:
    """``starts`` debounced starts, ``STARTS_PER_KEY`` per key (module docstring)."""
    async with open_store("mongo", uri, "q2_debounce") as (store, counter, _):
        await store.init()
        client = Engine(store)

        @client.workflow(WORKFLOW)
        async def debounced(ctx: WorkflowContext, data: Any) -> Any:
            return data

        if counter is not None:
            counter.reset()
        began = time.perf_counter()
        for n in range(starts):
            key = f"doc-{n // STARTS_PER_KEY}"
            await client.start(WORKFLOW, n, debounce_key=key, debounce="1h")
        seconds = time.perf_counter() - began
        commands = dict(counter.counts) if counter is not None else {}
    total = sum(commands.values())
    return Measurement(
        seconds,
        starts,
        commands,
        {"commands_per_start": total / starts, "starts_per_s": starts / seconds},
    )


def variants(sizes: Sizes, uri: str) -> list[tuple[str, Callable[[], Awaitable[Measurement]]]]:
    """Q2's variants: (name, measurement to await)."""
    depth = sizes.q1_depth
    fifo, fair = (
        lambda: admission_rate("mongo", uri, depth, CONCURRENCY, keys=KEYS),
        lambda: admission_rate("mongo", uri, depth, CONCURRENCY, keys=KEYS, fairness="key"),
    )
    return [
        ("debounced start", lambda: debounced_starts(uri, sizes.q1_depth // 10)),
        ("1,000 keys, first come", fifo),
        ('1,000 keys, fairness="key"', fair),
    ]


async def measure_all(
    uri: str,
    progress: Any,
    failed: Callable[[str, BaseException], None],
    into: list[Summary],
    *,
    sizes: Sizes = FULL,
) -> None:
    """The suite's Q2: each variant once, its summary appended to ``into``."""
    await measure_parts("Q2", variants(sizes, uri), progress, failed, into)


def q2_rows(results: Results) -> list[tuple[str, str, str, str, str, str, str, str]]:
    """The report's Q2 rows: starts/s and commands per debounced start; admissions/s and
    commands per admitted run, first come and fair; the fair/first-come ratio."""
    rows: list[tuple[str, str, str, str, str, str, str, str]] = []
    debounced = results.get("Q2", "mongo", "debounced start")
    if debounced is not None:
        rows.append(("Q2: a debounced start (target: at most 2 commands)", "starts/s", "—",
                     num(debounced.extra.get("starts_per_s", 0)), "—", "—", "—",
                     num(debounced.extra.get("commands_per_start", 0))))  # fmt: skip
    per_run: dict[str, float] = {}
    for name in ("first come", 'fairness="key"'):
        found = results.get("Q2", "mongo", f"1,000 keys, {name}")
        if found is not None and found.steps:
            per_run[name] = sum(found.commands.values()) / found.steps
            rows.append((f"Q2: admission, {KEYS:,} keys, concurrency={CONCURRENCY}, {name}",
                         "runs admitted/s", "—", num(found.extra.get("admitted_per_s", 0)),
                         "—", "—", "—", num(per_run[name])))  # fmt: skip
    if len(per_run) == 2:
        fair_over_fifo = per_run['fairness="key"'] / per_run["first come"]
        rows.append(("Q2: commands per admitted run, fair ÷ first come (target: at most 1.5)",
                     "ratio", "—", num(fair_over_fifo), "—", "—", "—", "—"))  # fmt: skip
    return rows
