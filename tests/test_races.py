"""Races between a pass and the API calls that stop it, and runs that must not hang.
A store proxy holds one write back so the other side lands in between, as a network
round trip would let it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from engine_core import Engine, StepFailedError, WorkflowContext, WorkflowRunFailedError
from engine_core.records import StepRecord
from engine_core.store import Store
from tests.conftest import open_store
from tests.test_retry_flow import register_flaky


@pytest.fixture(params=["memory", "mongo", "mongo-targeted"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """These tests also run with targeted polling forced on (the job and line indexes a
    sharded cluster gets)."""
    made = await open_store(request)
    yield made
    await made.close()


class GatedStore:
    """Delegates to a real store; ``insert_step`` of one kind waits for ``go``, and
    ``halt_steps(True)`` can be slowed down."""

    def __init__(self, inner: Store, gate_kind: str | None = None, slow_halt: float = 0):
        self._inner = inner
        self.gate_kind = gate_kind
        self.slow_halt = slow_halt
        self.reached = asyncio.Event()
        self.go = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def insert_step(self, step: StepRecord) -> bool:
        if step.kind == self.gate_kind and not self.go.is_set():
            self.reached.set()
            await self.go.wait()
        return await self._inner.insert_step(step)

    async def halt_steps(self, run_id: str, halted: bool) -> None:
        if halted and self.slow_halt:
            await asyncio.sleep(self.slow_halt)
        await self._inner.halt_steps(run_id, halted)


@pytest.mark.parametrize("kind", ["dispatch", "child"])
async def test_nothing_starts_after_cancel_returns_even_mid_arm(store: Store, kind: str) -> None:
    gated = GatedStore(store, gate_kind=kind)
    engine = Engine(gated, lease_ttl="5s")  # type: ignore[arg-type]
    ran: list[str] = []

    @engine.workflow("child")
    async def child(ctx: WorkflowContext, data: Any) -> int:
        await ctx.step("side-effect", lambda: ran.append("child step"))
        return 1

    @engine.step_function("email")
    async def email(payload: Any) -> int:
        ran.append("dispatched step")
        return 1

    @engine.workflow("parent")
    async def parent(ctx: WorkflowContext, data: Any) -> Any:
        if kind == "child":
            return await ctx.child("c", "child")
        return await ctx.dispatch("d", "email")

    async with engine:
        run_id = await engine.start("parent")
        await asyncio.wait_for(gated.reached.wait(), 5)
        await engine.cancel(run_id)  # lands between the pass's start and its insert
        gated.go.set()
        await asyncio.sleep(0.5)
    assert ran == []
    runs = await engine.list_runs()
    assert {r.status for r in runs} == {"cancelled"}


async def test_a_suspend_racing_a_resume_leaves_no_job_halted(store: Store) -> None:
    gated = GatedStore(store, slow_halt=0.05)
    engine = Engine(gated, lease_ttl="5s")  # type: ignore[arg-type]
    ran: list[int] = []

    @engine.step_function("job")
    async def job(payload: Any) -> int:
        ran.append(1)
        if len(ran) == 1:
            raise RuntimeError("first try")
        return 1

    @engine.workflow("w")
    async def w(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.dispatch("d", "job", None, retries=1, retry_delay="500ms")

    async with engine:
        run_id = await engine.start("w")
        while not ran:
            await asyncio.sleep(0.01)
        suspending = asyncio.ensure_future(engine.suspend(run_id))
        while (await engine.status(run_id)).status != "suspended":
            await asyncio.sleep(0.005)
        await engine.resume(run_id)  # lands while the suspend's halt is still on its way
        await suspending
        assert await engine.result(run_id, timeout=10) == 1


class HeldStore:
    """Delegates to a real store; admissions and pass begins can be held until their
    gate opens, and lease renewals refused (a process paused past its lease)."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner
        self.admit = Gate(closed=False)
        self.begin = Gate(closed=False)
        self.renew = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def admit_run_holding(self, run: Any, **kwargs: Any) -> Any:
        await self.admit.pass_()
        return await self._inner.admit_run_holding(run, **kwargs)

    async def begin_pass(self, run_id: str, **kwargs: Any) -> Any:
        await self.begin.pass_()
        return await self._inner.begin_pass(run_id, **kwargs)

    async def extend_pass(self, run_id: str, **kwargs: Any) -> bool:
        return self.renew and bool(await self._inner.extend_pass(run_id, **kwargs))


class Gate:
    def __init__(self, *, closed: bool) -> None:
        self.reached = asyncio.Event()
        self.open = asyncio.Event()
        if not closed:
            self.open.set()

    async def pass_(self) -> None:
        self.reached.set()
        await self.open.wait()

    def close(self) -> None:
        self.reached.clear()
        self.open.clear()


async def test_a_run_admitted_while_a_drive_of_it_ends_is_driven(store: Store) -> None:
    """A retried run's admission hands this process its lease while a drive of the run
    (kicked by an event, finding it not yet admitted) is still ending: the pass must
    run here, not wait with the lease held by no one until it lapses."""
    held = HeldStore(store)
    engine = Engine(held, lease_ttl="60s")  # type: ignore[arg-type]
    broken = {"on": True}
    register_flaky(engine, broken)
    engine.queue("digests")
    async with engine:
        run_id = await engine.start("flaky", queue="digests", dedup_id="d7")
        with pytest.raises(WorkflowRunFailedError):
            await engine.result(run_id, timeout=10)
        broken["on"] = False
        held.admit.close()
        held.begin.close()
        await engine.retry(run_id)
        await engine.send_event(run_id, "go", 1)  # kicks a drive: it waits to begin
        await asyncio.wait_for(held.begin.reached.wait(), 10)
        held.admit.open.set()  # admitted holding the lease while that drive is on
        for _ in range(500):
            if (await store.get_run(run_id)).status == "running":  # type: ignore[union-attr]
                break
            await asyncio.sleep(0.01)
        held.begin.open.set()  # the drive finds the lease taken and ends
        assert await engine.result(run_id, timeout=10) == 1


async def test_a_pass_failing_after_it_lost_its_lease_leaves_no_job_halted(
    store: Store,
) -> None:
    """A pass fenced out by a new owner (parked on the run's queue job) then fails: its
    halt of the run's jobs must not outlive it, or no worker would take the job."""
    held = HeldStore(store)
    engine = Engine(held, lease_ttl="1s")  # type: ignore[arg-type]
    release = asyncio.Event()

    @engine.workflow("w")
    async def w(ctx: WorkflowContext, data: Any) -> Any:
        # "remote" is no step function here: the job waits on the queue.
        armed = asyncio.ensure_future(ctx.dispatch("job", "remote"))
        await release.wait()
        raise RuntimeError(f"late failure ({armed.done()=})")

    async with engine:
        run_id = await engine.start("w")
        while await store.get_step(run_id, "job") is None:
            await asyncio.sleep(0.01)
        held.renew = False
        await asyncio.sleep(1.2)  # the lease lapses; another process takes the run
        taken = await store.begin_pass(run_id, holder="another process", ttl=60)
        assert taken is not None
        release.set()  # the old pass fails, fenced out
        for _ in range(500):  # until its drive ended (the driver is not public API)
            await asyncio.sleep(0.01)
            if not engine._host.driver.driving(run_id):
                break
        job = await store.get_step(run_id, "job")
        run = await store.get_run(run_id)
        assert job is not None and run is not None
        assert (run.status, run.lease_holder, job.halted) == ("running", "another process", False)


async def test_a_failure_beside_a_parked_wait_reaches_the_body(engine: Engine) -> None:
    async def charge() -> None:
        raise RuntimeError("card declined")

    @engine.workflow("g")
    async def g(ctx: WorkflowContext, data: Any) -> Any:
        return await asyncio.gather(ctx.wait_for_event("approval"), ctx.step("charge", charge))

    async with engine:
        run_id = await engine.start("g")
        with pytest.raises(WorkflowRunFailedError, match="card declined"):
            await engine.result(run_id, timeout=10)


async def test_a_child_of_an_unknown_workflow_fails_the_parent(engine: Engine) -> None:
    seen: list[str] = []

    @engine.workflow("p")
    async def p(ctx: WorkflowContext, data: Any) -> Any:
        try:
            return await ctx.child("c", "typo")
        except StepFailedError:  # pragma: no cover - not a step failure
            seen.append("step")
            raise

    async with engine:
        run_id = await engine.start("p")
        with pytest.raises(WorkflowRunFailedError, match="'typo', which is not registered"):
            await engine.result(run_id, timeout=10)
    assert seen == []
    assert [r.run_id for r in await engine.list_runs()] == [run_id]


async def test_a_crash_during_compensation_is_recovered(make_engine: Any) -> None:
    stuck = asyncio.Event()
    undone: list[str] = []

    def build(engine: Engine, hang: bool) -> None:
        async def undo(result: Any) -> None:
            if hang:
                stuck.set()
                await asyncio.Event().wait()  # the process dies in here
            undone.append(result)

        @engine.workflow("w")
        async def w(ctx: WorkflowContext, data: Any) -> None:
            await ctx.step("a", lambda: "a", compensate=undo)
            await ctx.step("b", lambda: 1 / 0)

    first: Engine = make_engine(lease_ttl="300ms", shutdown_grace=0)
    build(first, hang=True)
    second: Engine = make_engine(lease_ttl="300ms", recovery_interval="200ms")
    build(second, hang=False)
    async with first:
        run_id = await first.start("w")
        await asyncio.wait_for(stuck.wait(), 5)
        await asyncio.sleep(0)  # die now, mid-compensation (no shutdown grace)
    assert (await first.status(run_id)).status == "compensating"
    async with second:
        with pytest.raises(WorkflowRunFailedError):
            await second.result(run_id, timeout=10)
    # The lost compensation attempt counts: with no retries it fails for good.
    assert (await second.status(run_id)).status == "compensation_failed"
