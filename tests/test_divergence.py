"""Divergence detection (docs/guides/changing-code.md): a replay that parts from the run's
record suspends the run with a NonDeterminismError instead of handing a result to the
wrong step."""

from __future__ import annotations

import asyncio
from typing import Any

from engine_core import Engine, RunStatus, WorkflowContext
from engine_core.common.journal import merged
from engine_core.memory import InMemoryStore


def charge(x: Any = None) -> str:
    return "charged"


def ship(x: Any = None) -> str:
    return "shipped"


def refund(x: Any = None) -> str:
    return "refunded"


async def _settled(engine: Engine, run_id: str, status: str = "suspended") -> RunStatus:
    for _ in range(200):
        st = await engine.status(run_id)
        if st.status == status:
            return st
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} is {st.status}, not {status}")


async def _parked(engine: Engine, run_id: str, step: str) -> None:
    for _ in range(200):
        st = await engine.status(run_id)
        if step in st.steps and st.steps[step].status == "scheduled":
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"run {run_id} never parked on {step}")


async def test_a_moved_step_suspends_the_run_and_a_fixed_deploy_resumes_it(
    engine: Engine,
) -> None:
    code = {"v": 1}
    ran: list[str] = []

    def step_a() -> str:
        ran.append("a")
        return "a"

    def step_b() -> str:
        ran.append("b")
        return "b"

    @engine.workflow("order")
    async def order(ctx: WorkflowContext, data: Any) -> list[str]:
        if code["v"] == 1:
            a = await ctx.step("a", step_a)
            await ctx.wait_for_event("go")
            return [a, await ctx.step("b", step_b)]
        b = await ctx.step("b-new", step_b)
        await ctx.wait_for_event("go")
        return [b, await ctx.step("a", step_a)]

    async with engine:
        run_id = await engine.start("order")
        await _parked(engine, run_id, "go")
        code["v"] = 2
        await engine.send_event(run_id, "go", None)
        st = await _settled(engine, run_id)
        assert st.error is not None and st.error["type"] == "NonDeterminismError"
        assert st.error["step"] == "a"
        assert "b-new" in st.error["found"] and "step_a" in st.error["recorded"]
        assert ran == ["a"]  # nothing ran for the divergent pass
        assert "b-new" not in st.steps
        code["v"] = 1
        await engine.resume(run_id)
        assert await engine.result(run_id, timeout=10) == ["a", "b"]
        assert ran == ["a", "b"]


async def test_a_step_whose_callable_changed_is_caught(engine: Engine) -> None:
    code = {"fn": charge}

    @engine.workflow("pay")
    async def pay(ctx: WorkflowContext, data: Any) -> Any:
        done = await ctx.step("pay", code["fn"])
        await ctx.sleep("nap", "200ms")
        return done

    async with engine:
        run_id = await engine.start("pay")
        await _parked(engine, run_id, "nap")
        code["fn"] = ship
        st = await _settled(engine, run_id)
        assert st.error is not None and st.error["step"] == "pay"
        assert st.error["recorded"].endswith("charge") and "ship" in st.error["found"]
        code["fn"] = charge
        await engine.resume(run_id)
        assert await engine.result(run_id, timeout=10) == "charged"


async def test_a_step_whose_kind_changed_is_caught(engine: Engine) -> None:
    code = {"v": 1}

    @engine.workflow("kinds")
    async def kinds(ctx: WorkflowContext, data: Any) -> Any:
        if code["v"] == 1:
            got = await ctx.wait_for_event("approval")
        else:
            got = await ctx.step("approval", charge)
        await ctx.sleep("nap", "200ms")
        return got

    async with engine:
        run_id = await engine.start("kinds")
        await engine.send_event(run_id, "approval", "yes")
        await _parked(engine, run_id, "nap")
        code["v"] = 2
        st = await _settled(engine, run_id)
        assert st.error is not None and st.error["step"] == "approval"
        assert st.error["recorded"].startswith("event") and "inline" in st.error["found"]


async def test_swapped_steps_are_caught(engine: Engine) -> None:
    code = {"v": 1}

    @engine.workflow("swap")
    async def swap(ctx: WorkflowContext, data: Any) -> Any:
        names = ["x", "y"] if code["v"] == 1 else ["y", "x"]
        out = [await ctx.step(n, charge) for n in names]
        await ctx.sleep("nap", "200ms")
        return out

    async with engine:
        run_id = await engine.start("swap")
        await _parked(engine, run_id, "nap")
        code["v"] = 2
        st = await _settled(engine, run_id)
        assert st.error is not None and st.error["step"] == "x"
        assert "'y'" in st.error["found"]


async def test_a_removed_step_is_caught_not_skipped(engine: Engine) -> None:
    code = {"v": 1}

    @engine.workflow("removed")
    async def removed(ctx: WorkflowContext, data: Any) -> Any:
        if code["v"] == 1:
            await ctx.step("gone", charge)
        await ctx.sleep("nap", "200ms")
        return await ctx.step("last", ship)

    async with engine:
        run_id = await engine.start("removed")
        await _parked(engine, run_id, "nap")
        code["v"] = 2
        st = await _settled(engine, run_id)
        assert st.error is not None and st.error["step"] == "gone"


async def test_gathered_steps_never_raise_a_false_alarm(engine: Engine) -> None:
    async def branch(ctx: WorkflowContext, name: str, n: int) -> list[str]:
        out = []
        for i in range(n):
            await asyncio.sleep(0.001 * ((i * 7 + len(name)) % 3))
            out.append(await ctx.step(name, charge))
        return out

    @engine.workflow("fan")
    async def fan(ctx: WorkflowContext, data: Any) -> Any:
        got = await asyncio.gather(branch(ctx, "p", 3), branch(ctx, "q", 1), branch(ctx, "r", 2))
        await ctx.sleep("nap", "100ms")
        more = await asyncio.gather(ctx.step("s", ship), ctx.sleep("s2", "50ms"))
        return [got, more[0]]

    async with engine:
        run_id = await engine.start("fan")
        out = await engine.result(run_id, timeout=10)
        assert out[1] == "shipped"
        st = await engine.status(run_id)
        assert st.status == "completed"


def _forget_identity(store: InMemoryStore) -> None:
    """Make every record look as stored before the check: no order, no callable."""
    for step in store._steps.values():
        step.order = step.ran = None
    for run in store._runs.values():
        for step in run.journal.values():
            step.order = step.ran = None


async def test_old_records_are_checked_only_where_they_say_enough() -> None:
    store = InMemoryStore()
    engine = Engine(store)
    code = {"fn": charge}

    @engine.workflow("old")
    async def old(ctx: WorkflowContext, data: Any) -> Any:
        first = await ctx.step("pay", code["fn"])
        await ctx.wait_for_event("go")
        return [first, await ctx.step("ship", ship)]

    async with engine:
        run_id = await engine.start("old")
        await _parked(engine, run_id, "go")
        _forget_identity(store)
        code["fn"] = refund  # no callable recorded: this record cannot tell
        await engine.send_event(run_id, "go", None)
        assert await engine.result(run_id, timeout=10) == ["charged", "shipped"]


async def test_old_records_still_catch_a_new_kind_or_a_skipped_step() -> None:
    store = InMemoryStore()
    engine = Engine(store)
    code = {"v": 1}

    @engine.workflow("old")
    async def old(ctx: WorkflowContext, data: Any) -> Any:
        if code["v"] == 1:
            await ctx.step("pay", charge)
        await ctx.wait_for_event("go")
        await ctx.step("ship", ship)
        return "done"

    async with engine:
        run_id = await engine.start("old")
        await _parked(engine, run_id, "go")
        _forget_identity(store)
        code["v"] = 2  # "pay" removed: "go" was recorded, so reaching it skips "pay"...
        await engine.send_event(run_id, "go", None)
        st = await _settled(engine, run_id)
        # ...which an old record cannot order; but the first new step finds it unreached.
        assert st.error is not None and st.error["step"] == "pay"
        code["v"] = 1
        await engine.resume(run_id)
        assert await engine.result(run_id, timeout=10) == "done"


def test_what_a_step_ran_is_named_by_module_and_qualified_name() -> None:
    import dataclasses
    import functools

    from engine_core.run.divergence import callable_name

    def deco(fn: Any) -> Any:
        @functools.wraps(fn)
        def wrapper(*args: Any) -> Any:
            return fn(*args)

        return wrapper

    @deco
    def first() -> None: ...

    @deco
    def second() -> None: ...

    class Box:
        def method(self) -> None: ...

    here = f"{__name__}:test_what_a_step_ran_is_named_by_module_and_qualified_name.<locals>"
    for _ in range(2):  # the second time from the cache: decorated functions share code
        assert callable_name(first) == f"{here}.first"
        assert callable_name(second) == f"{here}.second"
    assert callable_name(Box().method) == f"{here}.Box.method"
    assert callable_name(functools.partial(charge, 1)) == f"{__name__}:charge"
    assert callable_name(print) == "builtins:print"

    @dataclasses.dataclass
    class Unhashable:
        n: int

        def __call__(self) -> int:
            return self.n

    assert callable_name(Unhashable(1)) == f"{here}.Unhashable"


async def test_a_dispatched_step_whose_step_function_changed_is_caught(engine: Engine) -> None:
    code = {"fn": "send-email"}

    @engine.step_function("send-email")
    async def send_email(payload: Any) -> str:
        return "sent"

    @engine.step_function("send-sms")
    async def send_sms(payload: Any) -> str:
        return "texted"

    @engine.workflow("notify")
    async def notify(ctx: WorkflowContext, data: Any) -> Any:
        done = await ctx.dispatch("notify", code["fn"], {"to": "x"})
        await ctx.wait_for_event("go")
        return done

    async with engine:
        run_id = await engine.start("notify")
        await _parked(engine, run_id, "go")
        code["fn"] = "send-sms"
        await engine.send_event(run_id, "go", None)
        st = await _settled(engine, run_id)
        assert st.error is not None and st.error["step"] == "notify"
        assert st.error["recorded"] == "dispatch send-email"
        assert st.error["found"] == "reached it as dispatch send-sms"
        code["fn"] = "send-email"
        await engine.resume(run_id)
        assert await engine.result(run_id, timeout=10) == "sent"


async def test_a_step_whose_outcome_was_lost_runs_again_without_a_false_alarm() -> None:
    """A later step's record landed but the write carrying the outcome of the step
    before it did not (a job inserted before that write, under connection resets): the
    lost step has no record, so the next pass runs it again where it stood."""
    store = InMemoryStore()
    ran: list[str] = []

    def pay() -> str:
        ran.append("pay")
        return "paid"

    def deploy() -> Engine:
        engine = Engine(store)

        @engine.workflow("lost")
        async def lost(ctx: WorkflowContext, data: Any) -> Any:
            first = await ctx.step("pay", pay)
            second = await ctx.step("ship", ship)
            await ctx.wait_for_event("go")
            return [first, second]

        return engine

    async with (engine := deploy()):
        run_id = await engine.start("lost")
        await _parked(engine, run_id, "go")
    store._runs[run_id].journal.pop("pay", None)  # the outcome's write was lost
    store._steps.pop((run_id, "pay"), None)
    async with (engine := deploy()):
        await engine.send_event(run_id, "go", None)
        assert await engine.result(run_id, timeout=10) == ["paid", "shipped"]
    assert ran == ["pay", "pay"]
    steps = merged(store._runs[run_id], await store.load_steps(run_id))
    assert [steps[k].order for k in ("pay", "ship", "go")] == [0, 1, 2]
