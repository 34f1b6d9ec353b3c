"""``engine.fork`` (docs/guides/repair.md) on both stores: a new run that reuses the
steps the original finished before a step, runs that step and all after it anew, and
never starts a finished child again."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from engine_core import (
    Engine,
    RunNotFoundError,
    StepNotFoundError,
    WorkflowContext,
    WorkflowRunFailedError,
    current_step,
)


def register_order(engine: Engine, calls: Counter[str], broken: dict[str, bool]) -> None:
    """``order``: reserve, a child ``invoice``, then ``charge`` (fails while broken)."""

    def reserve(data: dict[str, Any]) -> str:
        calls["reserve"] += 1
        calls["key:reserve:" + current_step().idempotency_key] += 1
        return f"r-{data['n']}"

    def charge(data: dict[str, Any]) -> str:
        calls["charge"] += 1
        calls["key:charge:" + current_step().idempotency_key] += 1
        if broken["charge"]:
            raise ConnectionError("provider down")
        return f"c-{data['n']}"

    def undo(*reserved: Any) -> None:
        calls["undo"] += 1

    @engine.workflow("invoice")
    async def invoice(ctx: WorkflowContext, data: dict[str, Any]) -> str:
        calls["invoice"] += 1
        return f"i-{data['n']}"

    @engine.workflow("order")
    async def order(ctx: WorkflowContext, data: dict[str, Any]) -> list[str]:
        r = await ctx.step("reserve", reserve, data, compensate=undo)
        i = await ctx.child("invoice", "invoice", data)
        c = await ctx.step("charge", charge, data)
        return [r, i, c]


async def _failed(engine: Engine, run_id: str) -> None:
    with pytest.raises(WorkflowRunFailedError, match="provider down"):
        await engine.result(run_id, timeout=10)


async def test_a_fork_from_the_failure_reuses_earlier_steps_and_children(engine: Engine) -> None:
    calls: Counter[str] = Counter()
    broken = {"charge": True}
    register_order(engine, calls, broken)
    async with engine:
        original = await engine.start("order", {"n": 1})
        await _failed(engine, original)
        broken["charge"] = False
        plan = await engine.fork_plan(original)
        assert (plan.from_step, plan.copied) == ("charge", ["invoice"])
        assert (plan.run_again, plan.compensated) == (["reserve", "charge"], ["reserve"])
        fork = await engine.fork(original)
        assert await engine.result(fork, timeout=10) == ["r-1", "i-1", "c-1"]
        # The child before the failed step was copied (no duplicate child started);
        # the reservation the original's compensation undid ran again.
        assert (calls["reserve"], calls["invoice"], calls["charge"]) == (2, 1, 2)
        forked = await engine.status(fork)
        assert forked.forked_from == {"run_id": original, "step": "charge"}
        assert forked.steps["reserve"].status == "succeeded"
        assert await engine.list_children(fork) == []  # the child is the original's
        before = await engine.status(original)
        # A compensated run (not retryable) forks all the same, and stays as it was.
        assert before.status == "compensated" and before.forks == 1
        assert before.forked_from is None
        assert await engine.list_forks(original) == [fork]
        # The steps that ran again had keys of their own: a new run, a new key.
        charge_keys = [k for k in calls if k.startswith("key:charge:")]
        assert len(charge_keys) == 2


def register_shop(engine: Engine, charges: list[str], fail_pack: dict[str, bool]) -> None:
    """``shop``: ``charge`` (refunded by its compensation), ``pack``, ``ship``."""

    def charge(n: int) -> str:
        charges.append(f"ch-{n}-{len(charges)}")
        return charges[-1]

    def refund(charge_id: str) -> None:
        charges.append(f"refunded {charge_id}")

    def pack(charge_id: str) -> str:
        if fail_pack["now"]:
            raise RuntimeError("no boxes")
        return f"packed on {charge_id}"

    @engine.workflow("shop")
    async def shop(ctx: WorkflowContext, n: int) -> str:
        charge_id = await ctx.step("charge", charge, n, compensate=refund)
        await ctx.step("pack", pack, charge_id)
        await ctx.sleep("cool-off", "10ms")  # a later pass replays the fork's record
        return str(await ctx.step("ship", lambda: f"shipped on {charge_id}"))


async def test_a_fork_of_a_compensated_run_runs_the_undone_steps_anew(engine: Engine) -> None:
    """The charge was refunded by the original's compensation: the fork charges again
    and ships on the new charge, never on the refunded one."""
    charges: list[str] = []
    fail_pack = {"now": True}
    register_shop(engine, charges, fail_pack)
    async with engine:
        original = await engine.start("shop", 7)
        with pytest.raises(WorkflowRunFailedError, match="no boxes"):
            await engine.result(original, timeout=10)
        assert (await engine.status(original)).status == "compensated"
        assert charges == ["ch-7-0", "refunded ch-7-0"]
        plan = await engine.fork_plan(original)
        assert plan.from_step == "pack" and plan.copied == []
        assert (plan.run_again, plan.compensated) == (["charge", "pack"], ["charge"])
        fail_pack["now"] = False
        fork = await engine.fork(original)
        assert await engine.result(fork, timeout=10) == "shipped on ch-7-2"
        assert charges == ["ch-7-0", "refunded ch-7-0", "ch-7-2"]
        status = await engine.status(fork)
        assert status.forked_from == {"run_id": original, "step": "pack"}
        assert status.steps["charge"].attempts == 1


async def test_a_fork_from_a_named_step_runs_it_and_all_after_anew(engine: Engine) -> None:
    calls: Counter[str] = Counter()
    register_order(engine, calls, {"charge": False})
    async with engine:
        original = await engine.start("order", {"n": 2})
        assert await engine.result(original, timeout=10) == ["r-2", "i-2", "c-2"]
        fork = await engine.fork(original, from_step="invoice", input={"n": 3})
        assert await engine.result(fork, timeout=10) == ["r-2", "i-3", "c-3"]
        assert (calls["reserve"], calls["invoice"], calls["charge"]) == (1, 2, 2)
        # A completed run with no failed step: forked from its first step (a restart).
        again = await engine.fork(original)
        assert await engine.result(again, timeout=10) == ["r-2", "i-2", "c-2"]
        assert calls["reserve"] == 2
        assert (await engine.status(again)).forked_from == {"run_id": original, "step": "reserve"}
        assert (await engine.status(original)).forks == 2


async def test_new_run_id_makes_a_fork_start_once(engine: Engine) -> None:
    calls: Counter[str] = Counter()
    register_order(engine, calls, {"charge": False})
    async with engine:
        original = await engine.start("order", {"n": 4})
        await engine.result(original, timeout=10)
        first = await engine.fork(original, from_step="charge", new_run_id="fork-4")
        second = await engine.fork(original, from_step="charge", new_run_id="fork-4")
        assert first == second == "fork-4"
        await engine.result("fork-4", timeout=10)
        assert calls["charge"] == 2
        assert await engine.list_forks(original) == ["fork-4"]
        with pytest.raises(Exception, match="already belongs to another run"):
            await engine.fork("fork-4", new_run_id=original)


async def test_unknown_runs_and_steps_are_told(engine: Engine) -> None:
    calls: Counter[str] = Counter()
    register_order(engine, calls, {"charge": False})
    async with engine:
        original = await engine.start("order", {"n": 5})
        await engine.result(original, timeout=10)
        with pytest.raises(RunNotFoundError):
            await engine.fork("no-such-run")
        with pytest.raises(StepNotFoundError, match="no step 'ship'") as raised:
            await engine.fork(original, from_step="ship")
        assert isinstance(raised.value, ValueError)
        assert await engine.list_forks(original) == []


async def test_kept_idempotency_keys_and_no_copied_compensation(engine: Engine) -> None:
    calls: Counter[str] = Counter()
    broken = {"charge": False}
    register_order(engine, calls, broken)
    async with engine:
        original = await engine.start("order", {"n": 6})
        assert await engine.result(original, timeout=10) == ["r-6", "i-6", "c-6"]
        broken["charge"] = True
        kept = await engine.fork(original, from_step="charge", keep_idempotency_keys=True)
        await _failed(engine, kept)  # broken now: the fork fails
        # The fork's failure undoes nothing it copied: "reserve" is the original's.
        assert calls["undo"] == 0 and calls["reserve"] == 1
        charge_keys = [k for k in calls if k.startswith("key:charge:")]
        assert len(charge_keys) == 1 and calls[charge_keys[0]] == 2


async def test_a_live_run_forks_and_a_dispatched_step_keeps_the_original_key(
    engine: Engine,
) -> None:
    keys: list[str] = []

    @engine.step_function("notify")
    async def notify(payload: Any) -> str:
        keys.append(current_step().idempotency_key)
        return "sent"

    @engine.workflow("approval")
    async def approval(ctx: WorkflowContext, data: Any) -> Any:
        await ctx.dispatch("notify", "notify", data)
        return await ctx.wait_for_event("approve")

    engine.queue("approvals")
    async with engine:
        original = await engine.start("approval", 1, queue="approvals")
        for _ in range(200):
            if (await engine.status(original)).steps.get("approve") is not None:
                break
            await asyncio.sleep(0.02)
        # A running run forks (from its first step: no step failed), on the same queue.
        fork = await engine.fork(original)
        again = await engine.fork(original, from_step="notify", keep_idempotency_keys=True)
        await engine.send_event(fork, "approve", "yes")
        await engine.send_event(again, "approve", "ok")
        assert await engine.result(fork, timeout=10) == "yes"
        assert await engine.result(again, timeout=10) == "ok"
        assert [(await engine.status(r)).queue for r in (fork, again)] == ["approvals"] * 2
        assert (await engine.status(original)).status == "running"  # untouched
        assert (await engine.status(original)).forks == 2
        # "notify" ran in each: a new key in the first fork, the original's in the second.
        assert len(keys) == 3 and keys.count(keys[0]) == 2 and len(set(keys)) == 2
        await engine.cancel(original)


async def _step_running(engine: Engine, run_id: str, key: str) -> None:
    for _ in range(500):
        step = (await engine.status(run_id)).steps.get(key)
        if step is not None and step.status == "running":
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"step {key!r} of {run_id} never ran")


async def test_a_fork_from_an_inline_step_still_running(engine: Engine) -> None:
    calls: Counter[str] = Counter()
    release = asyncio.Event()

    def first() -> str:
        calls["a"] += 1
        return "a"

    async def slow() -> str:
        calls["g"] += 1
        await release.wait()
        return "g"

    @engine.workflow("held")
    async def held(ctx: WorkflowContext, data: Any) -> list[str]:
        return [await ctx.step("a", first), await ctx.step("g", slow)]

    async with engine:
        original = await engine.start("held", run_id="fi-orig")
        await _step_running(engine, original, "g")
        # ``status`` lists it as running, so it is a fork point.
        fork = await engine.fork(original, from_step="g")
        await _step_running(engine, fork, "g")
        release.set()
        assert await engine.result(original, timeout=10) == ["a", "g"]
        assert await engine.result(fork, timeout=10) == ["a", "g"]
    assert calls == {"a": 1, "g": 2}  # "a" copied, "g" run anew
    assert (await engine.status(fork)).forked_from == {"run_id": original, "step": "g"}


@pytest.mark.parametrize("helpers", [False, True], ids=["calls", "branches"])
async def test_a_fork_from_one_member_of_a_gather_runs_the_whole_gather_again(
    engine: Engine, helpers: bool
) -> None:
    calls: Counter[str] = Counter()
    broken = {"w": True}

    def make(name: str) -> Any:
        def fn() -> str:
            calls[name] += 1
            if name == "w" and broken["w"]:
                raise RuntimeError("w is broken")
            return name

        return fn

    async def helper(ctx: WorkflowContext, name: str) -> str:
        await asyncio.sleep(0)
        return await ctx.step(name, make(name))

    @engine.workflow("gathered")
    async def gathered(ctx: WorkflowContext, data: Any) -> list[Any]:
        pre = await ctx.step("pre", make("pre"))
        if helpers:
            got = await asyncio.gather(*(helper(ctx, n) for n in "xyz"))
        else:
            got = await asyncio.gather(*(ctx.step(n, make(n)) for n in "xyz"))
        return [pre, got, await ctx.step("w", make("w"))]

    async with engine:
        original = await engine.start("gathered")
        with pytest.raises(WorkflowRunFailedError, match="w is broken"):
            await engine.result(original, timeout=10)
        keys = {k for k in (await engine.status(original)).steps if k.startswith("y")}
        (y,) = keys
        broken["w"] = False
        calls.clear()
        fork = await engine.fork(original, from_step=y)
        assert await engine.result(fork, timeout=10) == ["pre", ["x", "y", "z"], "w"]
    # The members of the gather started together: all run again; "pre" is copied.
    assert calls == {"x": 1, "y": 1, "z": 1, "w": 1}
