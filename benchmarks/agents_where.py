"""Where A1's time goes (:mod:`benchmarks.agents`): the durable agent's CPU per step,
taken apart by variants run in turn on the in-memory store.

* ``agent``: the agent without the capability, in a workflow (it makes no step);
* ``plain``: the same, then as many plain ``ctx.step`` steps as the durable agent makes;
* ``units``: the durable agent, each unit run in place instead of as a step (what
  pydantic-ai's durable machinery and the capability's hooks cost);
* ``durable``: the durable agent as it is.

The differences, per step: ``plain - agent`` is a plain step; ``units - agent``
pydantic-ai's machinery; ``durable - units`` the units' steps; ``durable - plain`` what
A1 reports. (The agent streams no events: none is written to the stream ``"agent"``.)
``units`` stubs a part of ``engine_core.pydantic_ai``: a diagnosis, not a measurement of
the capability.

``python -m benchmarks.agents_where`` prints the medians of interleaved rounds of CPU
time; ``python -m benchmarks.agents_where --variant V --runs N`` runs one variant N
times (after 2 to warm up), for an instruction count that a busy machine does not blur:
``valgrind --tool=callgrind python -m benchmarks.agents_where --variant V --runs 12``,
less the same with ``--runs 2``, divided by 10 runs of ``2 * turns + 1`` steps.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic_ai.durable_exec import ModelRequestId

import engine_core.pydantic_ai.units as units
from benchmarks.agents import _agent, _runs, noop
from engine_core import Engine, WorkflowContext
from engine_core.memory import InMemoryStore
from engine_core.pydantic_ai.events import run_events

VARIANTS = ("agent", "plain", "units", "durable")
_STEP = units.StepBackend.execute


async def _in_place(
    self: Any, *, operation_id: Any, body: Callable[[], Awaitable[object]], **_: Any
) -> object:
    """``StepBackend.execute`` with the unit run in place of its step."""
    if isinstance(operation_id, ModelRequestId) and (events := run_events()) is not None:
        await events.model_request(operation_id.streaming)
    return await body()


def _stub(variant: str) -> None:
    """Stub the parts of the capability ``variant`` leaves out."""
    units.StepBackend.execute = _in_place if variant == "units" else _STEP  # type: ignore[method-assign]


def _engine(turns: int) -> Engine:
    engine = Engine(InMemoryStore())
    durable, plain = _agent(turns, durable=True), _agent(turns, durable=False)

    @engine.workflow("agent")
    async def agent(ctx: WorkflowContext, data: Any) -> str:
        return (await plain.run("go")).output

    @engine.workflow("plain")
    async def plain_steps(ctx: WorkflowContext, data: Any) -> str:
        output = (await plain.run("go")).output
        for i in range(2 * turns + 1):
            await ctx.step(f"s{i}", noop)
        return output

    @engine.workflow("durable")
    async def durable_run(ctx: WorkflowContext, data: Any) -> str:
        return (await durable.run("go")).output

    return engine


async def one(variant: str, runs: int, turns: int) -> None:
    engine = _engine(turns)
    _stub(variant)
    workflow = variant if variant in ("agent", "plain") else "durable"
    async with engine:
        await _runs(engine, workflow, 2)
        await _runs(engine, workflow, runs)


async def where(runs: int, turns: int, rounds: int) -> dict[str, float]:
    """CPU ms per step of each variant: medians of ``rounds`` interleaved rounds."""
    engine = _engine(turns)
    cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
    steps = runs * (2 * turns + 1)
    async with engine:
        for variant in VARIANTS:
            _stub(variant)
            await _runs(engine, variant if variant in ("agent", "plain") else "durable", 2)
        for _ in range(rounds):
            for variant in VARIANTS:
                _stub(variant)
                workflow = variant if variant in ("agent", "plain") else "durable"
                cpu[variant].append((await _runs(engine, workflow, runs))[1] / steps * 1000)
    _stub("durable")
    return {v: statistics.median(c) for v, c in cpu.items()}


def report(m: dict[str, float]) -> str:
    parts = [
        ("a plain ctx.step", m["plain"] - m["agent"]),
        ("pydantic-ai's durable machinery (units run in place)", m["units"] - m["agent"]),
        ("the units as steps, beyond that", m["durable"] - m["units"]),
        ("the durable agent beyond a plain ctx.step (A1)", m["durable"] - m["plain"]),
    ]
    return "\n".join(f"{ms:7.3f} ms per step  {what}" for what, ms in parts)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", choices=VARIANTS)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    if args.variant:
        asyncio.run(one(args.variant, args.runs, args.turns))
    else:
        print(report(asyncio.run(where(args.runs, args.turns, args.rounds))))
