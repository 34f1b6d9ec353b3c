"""Property: for any schedule of step failures, crashes and re-drives, a step that
succeeded never runs again and its recorded result is what the workflow saw."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_core import Engine, WorkflowContext, current_step
from engine_core.memory import InMemoryStore
from engine_core.store import Store
from tests.conftest import mongo_store

# Per step: (attempts that fail, whether its process dies once mid-step, whether the
# workflow pauses after it, which ends the pass so the next one replays from the top).
step_plans = st.lists(
    st.tuples(st.integers(min_value=0, max_value=2), st.booleans(), st.booleans()),
    min_size=1,
    max_size=6,
)


async def _run_schedule(
    plan: list[tuple[int, bool, bool]], rivals: list[bool], mongo_uri: str | None
) -> None:
    store: Store = InMemoryStore() if mongo_uri is None else await mongo_store(mongo_uri)
    try:
        await _check_schedule(store, plan, rivals)
    finally:
        await store.close()


async def _check_schedule(
    store: Store, plan: list[tuple[int, bool, bool]], rivals: list[bool]
) -> None:
    engine = Engine(store, lease_ttl="5s")
    rival = Engine(store, lease_ttl="5s")  # another process racing for the same run
    successes: Counter[int] = Counter()
    crashed: set[int] = set()
    seen: list[str] = []

    def make_step(i: int) -> Any:
        def step() -> str:
            info = current_step()
            assert info is not None
            failures, crash, _ = plan[i]
            if info.attempt <= failures:
                raise RuntimeError(f"planned failure {info.attempt}")
            if crash and i not in crashed:
                crashed.add(i)
                # The process dies mid-step: no outcome is recorded.
                raise asyncio.CancelledError()
            successes[i] += 1
            return f"step{i}-attempt{info.attempt}"

        return step

    async def planned(ctx: WorkflowContext, data: Any) -> list[str]:
        out = []
        for i, (_, _, pause) in enumerate(plan):
            out.append(await ctx.step(f"s{i}", make_step(i), retries=3))
            if pause:
                await ctx.sleep(f"pause{i}", 0)
        seen.clear()
        seen.extend(out)
        return out

    engine.workflow("planned")(planned)
    rival.workflow("planned")(planned)

    run_id = await engine.start("planned")
    for turn in range(200):
        status = await engine.status(run_id)
        if status.status != "running":
            break
        drivers = [engine.drive(run_id)]
        if rivals and rivals[turn % len(rivals)]:
            drivers.append(rival.drive(run_id))
        for outcome in await asyncio.gather(*drivers, return_exceptions=True):
            # The simulated crash surfaces as a cancellation; its pass let go of the lease.
            if not isinstance(outcome, bool | asyncio.CancelledError):
                raise outcome
        await store.request_pass(run_id)
    for extra in (engine, rival):  # re-drives of a finished run change nothing
        await store.request_pass(run_id)
        await extra.drive(run_id)
    status = await engine.status(run_id)
    assert status.status == "completed", status
    for i in range(len(plan)):
        assert successes[i] == 1, (i, successes)
        recorded = status.steps[f"s{i}"]
        assert recorded.status == "succeeded"
        assert recorded.result == status.output[i] == seen[i]
        failures, crash, _ = plan[i]
        assert recorded.attempts == failures + int(crash) + 1


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(plan=step_plans, rivals=st.lists(st.booleans(), max_size=8))
@pytest.mark.parametrize("store_kind", ["memory", "mongo"])
def test_succeeded_steps_never_run_again(
    request: pytest.FixtureRequest,
    store_kind: str,
    plan: list[tuple[int, bool, bool]],
    rivals: list[bool],
) -> None:
    uri = request.getfixturevalue("nx_uri") if store_kind == "mongo" else None
    asyncio.run(_run_schedule(plan, rivals, uri))
