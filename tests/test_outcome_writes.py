"""Issue 19 case 3: a write that carries a pass's outcomes in the background and fails
loses nothing. What it was to carry goes with the pass's next write (here the one that
settles the run), which the pass awaits: the run never completes without them."""

from __future__ import annotations

import asyncio
from typing import Any

from engine_core import Engine, StoreUnavailableError, WorkflowContext
from engine_core.store import Store


class FailsOneCarry:
    """The test's store, whose first ``record_steps`` (the write a pass makes of its own
    when the body awaits something else after a step) fails as an outage would."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.failed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def record_steps(self, run_id: str, **kwargs: Any) -> bool:
        if not self.failed:
            self.failed += 1
            raise StoreUnavailableError("the test's store failed this write")
        return bool(await self._store.record_steps(run_id, **kwargs))


async def test_a_failed_background_write_loses_no_outcome(store: Store) -> None:
    failing = FailsOneCarry(store)
    engine = Engine(failing, lease_ttl="5s")  # type: ignore[arg-type]
    calls: list[int] = []

    def step() -> str:
        calls.append(1)
        return "value"

    @engine.workflow("w")
    async def w(ctx: WorkflowContext, data: Any) -> str:
        value = await ctx.step("a", step)
        await asyncio.sleep(0.05)  # the outcome of "a" goes in a write of its own
        return str(value)

    async with engine:
        run_id = await engine.start("w")
        assert await engine.result(run_id, timeout=30) == "value"
    assert failing.failed == 1
    status = await engine.status(run_id)
    assert status.steps["a"].status == "succeeded" and status.steps["a"].result == "value"
    assert len(calls) == 1 and status.steps["a"].attempts == 1
