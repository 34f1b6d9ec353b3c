"""What the value converter costs (in-memory store, this process; CPU time, which a
shared machine disturbs less than wall time):

- W1 (200 workflows of 10 no-op inline steps, plain JSON values, no declared types) as it
  is, and with the converter's hooks stubbed out (identity): the converter's overhead;
- a 20-field pydantic model per step: the round trip alone (``to_stored`` then reading it
  back as the model), and W1 whose steps return the model (declared ``-> Model``) against
  W1 whose steps return the same data as a plain dict, per step.

    python -m benchmarks.values [--reps 7]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from pydantic import BaseModel

import engine_core.engine as engine_module
import engine_core.fleet.worker as worker_module
import engine_core.front.starting as starting_module
import engine_core.run.context as context_module
import engine_core.run.run_pass as run_pass_module
from benchmarks import ours
from engine_core import Engine, WorkflowContext
from engine_core.common import convert
from engine_core.common.values import to_stored
from engine_core.memory import InMemoryStore

RUNS, STEPS = 200, 10


class Model20(BaseModel):
    """20 fields of the usual kinds."""

    id: int
    name: str
    email: str
    active: bool
    score: float
    total: Decimal
    created: datetime
    tags: list[str]
    a1: int
    a2: int
    a3: str
    a4: str
    a5: float
    a6: bool
    a7: int | None
    a8: str
    a9: list[int]
    a10: dict[str, int]
    a11: str
    a12: int


SAMPLE = Model20(
    id=1, name="n", email="e@x.y", active=True, score=1.5, total=Decimal("12.34"),
    created=datetime(2026, 12, 3, tzinfo=UTC), tags=["a", "b"], a1=1, a2=2, a3="x", a4="y",
    a5=0.5, a6=False, a7=None, a8="z", a9=[1, 2, 3], a10={"k": 1}, a11="w", a12=12,
)  # fmt: skip
PLAIN = SAMPLE.model_dump(mode="json")


@contextlib.contextmanager
def converter_stubbed() -> Iterator[None]:
    """The converter's hooks as identities (what W1 would cost without them)."""
    saved: list[tuple[Any, str, Any]] = []
    for module in (context_module, run_pass_module, engine_module, worker_module):
        for name, stub in (("from_json", lambda v, d: v), ("declared_return", lambda f: None)):
            if hasattr(module, name):
                saved.append((module, name, getattr(module, name)))
                setattr(module, name, stub)
    saved.append((starting_module, "check_input", starting_module.check_input))
    starting_module.check_input = lambda fn, workflow, input, *limit: input
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


def round_trip_us(n: int = 20_000) -> float:
    """µs for one checkpoint of the model: to JSON, a fresh copy, back to the model."""
    convert.from_json(to_stored(SAMPLE, "v"), Model20)
    began = time.process_time()
    for _ in range(n):
        convert.from_json(to_stored(SAMPLE, "v"), Model20)
    return (time.process_time() - began) / n * 1e6


async def model_steps(typed: bool) -> float:
    """W1 with steps returning the 20-field model (declared) or the same plain dict: µs
    per step."""
    engine = Engine(InMemoryStore())

    async def as_model() -> Model20:
        return SAMPLE

    async def as_dict():  # type: ignore[no-untyped-def]
        return PLAIN

    step_fn: Callable[[], Any] = as_model if typed else as_dict

    @engine.workflow("w")
    async def w(ctx: WorkflowContext, data: Any) -> int:
        for i in range(STEPS):
            await ctx.step(f"s{i}", step_fn)
        return STEPS

    async with engine:
        began = time.process_time()
        for _ in range(RUNS):
            await engine.result(await engine.start("w"), timeout=60)
        return (time.process_time() - began) / (RUNS * STEPS) * 1e6


async def w1_us() -> float:
    m = await ours.w1_sequential("memory", None, RUNS, STEPS)
    return m.extra["cpu_s"] / m.steps * 1e6


async def main(reps: int) -> None:
    w1: list[float] = []
    w1_stub: list[float] = []
    typed: list[float] = []
    plain: list[float] = []
    await w1_us()  # warm up (imports, caches)
    for rep in range(reps):  # interleaved, so that a busy moment hits both sides alike
        for stubbed in (rep % 2 == 0, rep % 2 == 1):
            if stubbed:
                with converter_stubbed():
                    w1_stub.append(await w1_us())
            else:
                w1.append(await w1_us())
        typed.append(await model_steps(True))
        plain.append(await model_steps(False))
    med = statistics.median
    print(f"| measure | CPU µs per step (median of {reps}) |")
    print("| --- | ---: |")
    print(f"| W1 in-memory, plain JSON values | {med(w1):.1f} |")
    print(f"| W1 in-memory, converter hooks stubbed out | {med(w1_stub):.1f} |")
    print(f"| converter overhead on W1 | {100 * (med(w1) / med(w1_stub) - 1):+.1f} % |")
    print(f"| 20-field model: to_stored + read back as the model | {round_trip_us():.1f} |")
    print(f"| W1 steps returning the 20-field model (declared) | {med(typed):.1f} |")
    print(f"| W1 steps returning the same data as a plain dict | {med(plain):.1f} |")
    print(f"| the model's round trip in a step (difference) | {med(typed) - med(plain):.1f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    asyncio.run(main(parser.parse_args().reps))
