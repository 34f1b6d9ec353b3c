"""A1: a durable pydantic-ai agent (docs/guides/agents.md), against plain steps.

Each workflow runs an agent whose ``FunctionModel`` answers ``turns`` requests with one
tool call each, then a text: ``2 * turns + 1`` steps (model requests and tool calls) with
``PikkuDurability``. The baseline workflow runs the same agent without the capability (it
makes no step) and then as many plain ``ctx.step`` no-op steps: the same pydantic-ai work
and the same number of steps. Their difference per step is what the capability costs
beyond a plain ``ctx.step``:

* ``commands_per_step``: MongoDB commands per step of the durable agent's runs (target:
  at most 1); ``extra_commands_per_step``: less the baseline's, per step.
* ``extra_cpu_ms``: this process's CPU time per step beyond the baseline's (target: under
  0.2 ms); ``cpu_ms``: the durable agent's CPU time per step, all in.

``python -m benchmarks.agents [--uri URI] [--runs 20] [--turns 10]`` runs it alone (in
memory, and on MongoDB with ``--uri``); :mod:`benchmarks.agents_where` takes its CPU time
apart.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from benchmarks.common import Measurement, StoreKind, open_store
from engine_core import Engine, WorkflowContext
from engine_core.pydantic_ai import PikkuDurability

DURABLE_WF = "a1-durable"
PLAIN_WF = "a1-plain"
#: Rounds of baseline and durable runs per repetition.
ROUNDS = 5


def _model(turns: int) -> FunctionModel:
    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = sum(isinstance(m, ModelResponse) for m in messages)
        if done < turns:
            return ModelResponse(
                parts=[ToolCallPart("lookup", {"n": done}, tool_call_id=f"c{done}")]
            )
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(answer)


def _agent(turns: int, durable: bool) -> Agent[None, str]:
    capabilities = [PikkuDurability()] if durable else []
    agent = Agent(_model(turns), name="bench", capabilities=capabilities)

    @agent.tool_plain
    async def lookup(n: int) -> int:
        return n

    return agent


async def noop() -> None:
    return None


def register(engine: Engine, turns: int) -> None:
    durable, plain = _agent(turns, durable=True), _agent(turns, durable=False)
    steps = 2 * turns + 1

    @engine.workflow(DURABLE_WF)
    async def durable_run(ctx: WorkflowContext, data: Any) -> str:
        return (await durable.run("go")).output

    @engine.workflow(PLAIN_WF)
    async def plain_run(ctx: WorkflowContext, data: Any) -> str:
        output = (await plain.run("go")).output
        for i in range(steps):
            await ctx.step(f"s{i}", noop)
        return output


async def _runs(engine: Engine, workflow: str, runs: int) -> tuple[float, float]:
    """Wall and CPU seconds of ``runs`` runs of ``workflow``, one after another."""
    gc.collect()
    began, cpu = time.perf_counter(), time.process_time()
    for _ in range(runs):
        run_id = await engine.start(workflow)
        await engine.result(run_id, timeout=600)
    return time.perf_counter() - began, time.process_time() - cpu


async def agent_steps(
    kind: StoreKind, uri: str | None, runs: int, turns: int, rounds: int = ROUNDS
) -> Measurement:
    """One repetition: ``rounds`` rounds, each of ``runs`` baseline runs then ``runs``
    durable-agent runs (alternating, so a busy moment of the machine weighs on both);
    the CPU figures are the medians of the rounds', the commands those of all."""
    steps = runs * (2 * turns + 1)
    plain_cpu: list[float] = []
    durable_cpu: list[float] = []
    seconds = 0.0
    plain_commands = commands = 0
    async with open_store(kind, uri, "a1") as (store, counter, _):
        engine = Engine(store)
        register(engine, turns)
        async with engine:
            await _runs(engine, PLAIN_WF, 2)  # warm both paths (imports, caches)
            await _runs(engine, DURABLE_WF, 2)
            for _ in range(rounds):
                if counter is not None:
                    counter.reset()
                plain_cpu.append((await _runs(engine, PLAIN_WF, runs))[1])
                if counter is not None:
                    plain_commands += sum(counter.snapshot().values())
                    counter.reset()
                wall, cpu = await _runs(engine, DURABLE_WF, runs)
                seconds, durable_cpu = seconds + wall, [*durable_cpu, cpu]
                if counter is not None:
                    commands += sum(counter.snapshot().values())
    extra: dict[str, float] = {
        "cpu_ms": statistics.median(durable_cpu) / steps * 1000,
        "extra_cpu_ms": statistics.median(
            d - p for d, p in zip(durable_cpu, plain_cpu, strict=True)
        )
        / steps
        * 1000,
    }
    by_name: dict[str, int] = {}
    if counter is not None:
        extra["commands_per_step"] = commands / (steps * rounds)
        extra["extra_commands_per_step"] = (commands - plain_commands) / (steps * rounds)
        by_name = {"all": commands // rounds}
    return Measurement(seconds / rounds, steps, by_name, extra)


def _print(kind: str, m: Measurement) -> None:
    print(
        f"{kind}: {m.steps} steps, {m.seconds / m.steps * 1000:.3f} ms per step; CPU per step "
        f"{m.extra['cpu_ms']:.3f} ms, beyond a plain step {m.extra['extra_cpu_ms']:.3f} ms"
        + (
            f"; commands per step {m.extra['commands_per_step']:.3f} "
            f"(beyond a plain step {m.extra['extra_commands_per_step']:+.3f})"
            if "commands_per_step" in m.extra
            else ""
        )
    )


async def main(uri: str | None, runs: int, turns: int) -> None:
    _print("memory", await agent_steps("memory", None, runs, turns))
    if uri is not None:
        _print("mongo", await agent_steps("mongo", uri, runs, turns))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uri", help="a MongoDB server to measure on too")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--turns", type=int, default=10)
    args = parser.parse_args()
    asyncio.run(main(args.uri, args.runs, args.turns))
