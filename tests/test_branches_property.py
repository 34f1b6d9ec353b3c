"""Property: in any body made of gathers of loops that reuse step names, each call gets
its own recorded result on every replay, whatever the timing of each pass (issue 36):
a recorded result never reaches another call."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_core import Engine, WorkflowContext
from engine_core.memory import InMemoryStore
from engine_core.store import Store
from tests.conftest import mongo_store

# A branch is a list of ops: a step, a loop of one name, a durable nap (the pass parks
# and the next one replays everything before it), or a gather of branches (depth 2).
# A top-level op may also be a gather of bare calls: tasks that are one call each.
NAMES = st.sampled_from(["w", "v"])
Op = tuple[Any, ...]
step = st.tuples(st.just("step"), NAMES)
loop = st.tuples(st.just("loop"), NAMES, st.integers(min_value=2, max_value=3))
nap = st.tuples(st.just("nap"), NAMES)
leaf_ops = st.one_of(step, loop, nap)
inner_branch = st.lists(leaf_ops, min_size=1, max_size=3)
inner_gather = st.tuples(st.just("gather"), st.lists(inner_branch, min_size=2, max_size=3))
branch = st.lists(st.one_of(leaf_ops, inner_gather), min_size=1, max_size=3)
direct = st.tuples(st.just("direct"), st.lists(NAMES, min_size=2, max_size=4))
top = st.lists(
    st.one_of(st.tuples(st.just("gather"), st.lists(branch, min_size=2, max_size=3)), direct),
    min_size=1,
    max_size=3,
)


async def _echo(value: str) -> str:
    return value


class Body:
    """The generated body: each call's result is checked against the label it was
    given, and the mismatches are the run's output."""

    def __init__(self, program: list[Op], seed: int) -> None:
        self.program = program
        self.seed = seed
        self.passes = 0

    async def __call__(self, ctx: WorkflowContext, data: Any) -> list[Any]:
        self.passes += 1
        # Each pass times its branches differently: their calls arrive in another order.
        rng = random.Random(self.seed * 1000 + self.passes)
        wrong: list[Any] = []

        async def call(name: str, label: str) -> None:
            await asyncio.sleep(rng.random() * 0.002)
            got = await ctx.step(name, _echo, label)
            if got != label:
                wrong.append((label, got))

        async def run(ops: list[Op], at: str) -> None:
            for i, op in enumerate(ops):
                here = f"{at}/{i}"
                if op[0] == "step":
                    await call(op[1], here)
                elif op[0] == "loop":
                    for k in range(op[2]):
                        await call(op[1], f"{here}.{k}")
                elif op[0] == "nap":
                    await asyncio.sleep(rng.random() * 0.002)
                    await ctx.sleep(op[1], 0)
                elif op[0] == "direct":
                    labels = [f"{here}.{k}" for k in range(len(op[1]))]
                    got = await asyncio.gather(
                        *(ctx.step(n, _echo, lb) for n, lb in zip(op[1], labels, strict=True))
                    )
                    wrong.extend((lb, g) for lb, g in zip(labels, got, strict=True) if lb != g)
                else:
                    await asyncio.gather(*(run(b, f"{here}.{k}") for k, b in enumerate(op[1])))

        await run(self.program, "")
        return wrong


async def _check(store: Store, program: list[Op], seed: int) -> None:
    body = Body(program, seed)
    engine = Engine(store, lease_ttl="5s")
    engine.workflow("branches")(body)
    async with engine:
        run_id = await engine.start("branches")
        out = await engine.result(run_id, timeout=60)
    assert out == [], (program, out)
    status = await engine.status(run_id)
    assert status.status == "completed"


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(program=top, seed=st.integers(min_value=0, max_value=10**6))
async def test_every_call_gets_its_own_result_on_every_replay_memory(
    program: list[Op], seed: int
) -> None:
    store = InMemoryStore()
    await store.init()
    await _check(store, program, seed)


@pytest.mark.slow
@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(program=top, seed=st.integers(min_value=0, max_value=10**6))
async def test_every_call_gets_its_own_result_on_every_replay_mongo(
    program: list[Op], seed: int, nx_uri: str
) -> None:
    store = await mongo_store(nx_uri)
    try:
        await _check(store, program, seed)
    finally:
        await store.close()
