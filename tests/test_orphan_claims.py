"""A claim whose attempt began here but whose outcome was never recorded is no orphan:
it is left to expire and counts as a lost attempt, so no attempt number runs twice."""

from __future__ import annotations

import asyncio
from typing import Any

from engine_core import Engine, WorkflowContext, current_step
from engine_core.memory import InMemoryStore


class LosesOneOutcome(InMemoryStore):
    """The write of the first successful outcome of a job fails for good."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    async def update_step(self, run_id: str, key: str, **kwargs: Any) -> bool:
        if not self.failed and kwargs["changes"].get("status") == "succeeded":
            self.failed = True
            raise RuntimeError("the outcome write failed")
        return await super().update_step(run_id, key, **kwargs)


async def test_an_attempt_that_ran_here_is_not_put_back_as_never_started() -> None:
    store = LosesOneOutcome()
    engine = Engine(store, lease_ttl="1s", recovery_interval="1s")
    attempts: list[int] = []

    @engine.step_function("job")
    async def job(payload: Any) -> str:
        attempts.append(current_step().attempt)
        return "done"

    @engine.workflow("w")
    async def w(ctx: WorkflowContext, data: Any) -> str:
        return str(await ctx.dispatch("job", "job", {}, retries=3))

    async with engine:
        run_id = await engine.start("w")
        for _ in range(200):
            if store.failed:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # the job's task has ended without its outcome
        # What the worker does after an outage: put back claims it is not running.
        await engine._host.worker._release_orphans()
        assert await engine.result(run_id, timeout=20) == "done"
    assert attempts == [1, 2]
