"""An outage that ends a pass after an inline step ran, before its outcome was written,
costs no attempt: the pass this process begins again once the store is back carries
the outcome it had recorded, instead of taking the step back as a lost attempt (which,
with no retries left, would fail the run)."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from engine_core import Engine
from engine_core.errors import StoreUnavailableError
from engine_core.memory import InMemoryStore


class Flaky(InMemoryStore):
    """An in-memory store that is unavailable while ``down`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        for name in dir(InMemoryStore):
            original = getattr(self, name)
            if name.startswith("_") or name in ("init", "close"):
                continue
            if not inspect.iscoroutinefunction(original):
                continue

            async def guarded(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
                if self.down:
                    raise StoreUnavailableError("the test took the store away")
                return await _original(*args, **kwargs)

            setattr(self, name, guarded)


def _two_steps(engine: Engine, store: Flaky, ran: list[str], outage_s: float) -> None:
    async def back_soon() -> None:
        await asyncio.sleep(outage_s)
        store.down = False

    async def a() -> str:
        ran.append("a")
        # The outage begins as the step ends: its outcome is recorded in the pass but
        # no write has carried it yet (the start of "b" is the next one).
        store.down = True
        asyncio.get_running_loop().create_task(back_soon())
        return "A"

    async def b() -> str:
        ran.append("b")
        return "B"

    @engine.workflow("two")
    async def two(ctx: Any, data: Any) -> Any:
        return [await ctx.step("a", a), await ctx.step("b", b)]


async def _check(engine: Engine, run_id: str, ran: list[str]) -> None:
    async with asyncio.timeout(30):
        assert await engine.result(run_id) == ["A", "B"]
    assert ran == ["a", "b"]
    status = await engine.status(run_id)
    attempts = {name: s.attempts for name, s in status.steps.items()}
    assert attempts == {"a": 1, "b": 1}, attempts


async def test_an_outcome_cut_off_by_an_outage_is_carried_by_the_next_pass() -> None:
    store = Flaky()
    engine = Engine(store, lease_ttl="5s")
    ran: list[str] = []
    _two_steps(engine, store, ran, outage_s=0.5)
    async with engine:
        run_id = await engine.start("two", None)
        await _check(engine, run_id, ran)


async def test_after_an_outage_the_fleet_leaves_the_cut_off_pass_its_run() -> None:
    # The outage outlasts the lease, so when the store is back every process could take
    # the run; the one whose pass the outage cut off (and which knows the outcome of
    # "a") notices later (its backoff has grown) than the other's recovery.
    store = Flaky()
    ran: list[str] = []
    owner = Engine(store, lease_ttl="1s", recovery_interval="1h")
    _two_steps(owner, store, ran, outage_s=2.0)
    async with owner:
        run_id = await owner.start("two", None)
        while not store.down:
            await asyncio.sleep(0.01)
        # Started a second into the outage, its tries fall due before the owner's.
        await asyncio.sleep(1.0)
        other = Engine(store, lease_ttl="1s", recovery_interval="0.2s")
        _two_steps(other, store, ran, outage_s=2.0)
        async with other:
            await _check(owner, run_id, ran)


async def test_a_job_outcome_that_landed_as_an_outage_began_is_handed_to_its_pass() -> None:
    """A dispatched step run here while its pass waits: the write of its outcome lands,
    then the store goes away before the reply. Written again once the store is back,
    it finds its guard failed by its own first try; it must still reach the pass (which
    is the only one told of it), or the run would wait for ever."""
    store = Flaky()
    engine = Engine(store, lease_ttl="5s")
    landed: list[str] = []
    original = store.update_step

    async def lands_then_outage(run_id: str, key: str, **kwargs: Any) -> bool:
        done = await original(run_id, key, **kwargs)
        if key == "job" and kwargs["changes"].get("status") == "succeeded" and not landed:
            landed.append(key)
            store.down = True  # the reply is lost with the store

            async def back_soon() -> None:
                await asyncio.sleep(0.5)
                store.down = False

            asyncio.get_running_loop().create_task(back_soon())
            raise StoreUnavailableError("the reply was lost")
        return done

    store.update_step = lands_then_outage  # type: ignore[method-assign]

    @engine.step_function("job")
    async def job(payload: Any) -> str:
        return "J"

    @engine.workflow("dispatches")
    async def dispatches(ctx: Any, data: Any) -> Any:
        return await ctx.dispatch("job", "job")

    async with engine:
        run_id = await engine.start("dispatches", None)
        async with asyncio.timeout(30):
            assert await engine.result(run_id) == "J"
    assert landed == ["job"]
