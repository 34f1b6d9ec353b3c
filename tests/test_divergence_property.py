"""Property: over generated workflows (gather, loops with ordinals, retries, sleeps, events,
children, compensation), unchanged code never diverges, and an edit that changes which
recorded step a call meets is caught (the run suspends with a NonDeterminismError and
nothing of the edit ran) or guarded by a patch (the old run keeps its old path)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_core import Engine, StepFailedError, WorkflowContext, current_step
from engine_core.memory import InMemoryStore
from engine_core.store import Store
from tests.conftest import mongo_store

Op = tuple[Any, ...]

_leaf = st.one_of(
    st.tuples(st.just("step"), st.integers(0, 1), st.integers(0, 3)),  # callable, failures
    st.tuples(st.just("sleep")),
    st.tuples(st.just("event")),
    st.tuples(st.just("child")),
    st.tuples(st.just("loop"), st.integers(1, 3)),
    st.tuples(st.just("comp")),
)
_op = st.one_of(
    _leaf,
    st.tuples(
        st.just("gather"),
        st.lists(st.lists(_leaf, min_size=1, max_size=3), min_size=2, max_size=3),
    ),
)
programs = st.lists(_op, min_size=1, max_size=5)
EDITS = ("rename", "remove", "swap", "change", "insert", "patched_insert")


def _named(program: list[Op]) -> list[tuple[str, Op]]:
    return [(f"o{i}", op) for i, op in enumerate(program)]


def _leaves(name: str, op: Op) -> list[tuple[str, Op]]:
    if op[0] != "gather":
        return [(name, op)]
    return [
        (f"{name}b{b}l{i}", leaf) for b, branch in enumerate(op[1]) for i, leaf in enumerate(branch)
    ]


class World:
    """What the steps did, counted by step key (successful attempts only)."""

    def __init__(self) -> None:
        self.succeeded: Counter[str] = Counter()
        self.undone: Counter[str] = Counter()

    def fn(self, which: int) -> Any:
        def first() -> str:
            return self._ran("f0")

        def second() -> str:
            return self._ran("f1")

        return (first, second)[which]

    def _ran(self, tag: str) -> str:
        info = current_step()
        assert info is not None
        fails = int(info.step.rsplit("_f", 1)[1][0]) if "_f" in info.step else 0
        if info.attempt <= fails:
            raise RuntimeError(f"planned failure {info.attempt}")
        self.succeeded[info.step] += 1
        return f"{tag}:{info.step}"

    def undo(self, result: Any) -> None:
        self.undone[str(result)] += 1


async def _leaf_call(ctx: WorkflowContext, world: World, name: str, op: Op) -> Any:
    kind = op[0]
    if kind == "step":
        try:
            return await ctx.step(f"{name}_f{op[2]}", world.fn(op[1]), retries=2)
        except StepFailedError:
            return "failed"
    if kind == "sleep":
        await ctx.sleep(name, 0)
        return None
    if kind == "event":
        return await ctx.wait_for_event(name)
    if kind == "child":
        return await ctx.child(name, "leaf", name)
    if kind == "loop":
        return [await ctx.step(name, world.fn(0)) for _ in range(op[1])]
    if kind == "comp":
        return await ctx.step(name, world.fn(0), compensate=world.undo)
    if kind == "new":
        return await ctx.step(name, world.fn(1))
    if kind == "patched":
        if await ctx.patched("edit"):
            return await ctx.step(name, world.fn(0))
        return None
    if kind == "hold":
        return await ctx.wait_for_event("hold")
    raise AssertionError(kind)


async def _op_call(ctx: WorkflowContext, world: World, name: str, op: Op) -> Any:
    if op[0] != "gather":
        return await _leaf_call(ctx, world, name, op)

    async def branch(b: int, leaves: list[Op]) -> list[Any]:
        return [await _leaf_call(ctx, world, f"{name}b{b}l{i}", x) for i, x in enumerate(leaves)]

    return await asyncio.gather(*(branch(b, leaves) for b, leaves in enumerate(op[1])))


def _body(world: World, code: dict[str, Any]) -> Any:
    async def planned(ctx: WorkflowContext, data: Any) -> list[Any]:
        out = [await _op_call(ctx, world, name, op) for name, op in code["program"]]
        if code["fail"]:
            raise RuntimeError("the run fails at its end")
        return out

    return planned


async def _leaf_workflow(ctx: WorkflowContext, data: Any) -> str:
    await ctx.sleep("nap", 0)
    return str(await ctx.step("inner", lambda: data))


def _edited(ops: list[tuple[str, Op]], edit: str, j: int) -> list[tuple[str, Op]]:
    """``ops`` with ``edit`` made at index ``j`` (never to the hold itself)."""
    out = list(ops)
    if edit == "insert":
        out.insert(j, ("new", ("new",)))
        return out
    if edit == "patched_insert":
        out.insert(j, ("new", ("patched",)))
        return out
    name, op = out[j]
    if edit == "rename":
        out[j] = (name + "x", op)
    elif edit == "remove":
        del out[j]
    elif edit == "swap":
        out[j], out[j + 1] = out[j + 1], out[j]
    elif op[0] == "gather":  # change: the first step of its first branch
        first = op[1][0][0]
        changed = ("step", 1 - first[1], first[2]) if first[0] == "step" else ("new",)
        out[j] = (name, ("gather", [[changed, *op[1][0][1:]], *op[1][1:]]))
    elif op[0] == "step":
        out[j] = (name, ("step", 1 - op[1], op[2]))
    else:  # another kind, or another callable, under the same name
        out[j] = (name, ("new",))
    return out


def _plan_edit(hold: int, size: int, edit: str, at: int) -> tuple[str, int, bool]:
    """Where the edit goes in the program with its hold (``size`` entries, the hold at
    ``hold``), and whether it touches what the run recorded before the hold."""
    if edit in ("insert", "patched_insert"):
        j = min(at, size)
        return edit, j, edit == "insert" and j < hold
    ops = [i for i in range(size) if i != hold]
    j = ops[min(at, len(ops) - 1)]
    if edit == "swap" and (j + 1 >= size or j + 1 == hold):
        edit = "rename"
    return edit, j, j < hold


async def _events(engine: Engine, run_id: str, named: list[tuple[str, Op]], sent: set[str]) -> None:
    for name, op in named:
        for leaf_name, leaf in _leaves(name, op):
            if leaf[0] == "event" and leaf_name not in sent:
                sent.add(leaf_name)
                await engine.send_event(run_id, leaf_name, leaf_name)


async def _until(engine: Engine, run_id: str, done: Any, timeout: float = 10) -> Any:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        status = await engine.status(run_id)
        if done(status):
            return status
        assert loop.time() < end, status
        await asyncio.sleep(0.01)


async def _quiet(engine: Engine, store: Store, run_id: str, timeout: float = 10) -> None:
    """Until no pass of the run is in flight here and none is owed (this process drives
    it alone; reads the engine's driver, which is not public API)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        run = await store.get_run(run_id)
        assert run is not None
        if not engine._host.driver.driving(run_id) and not run.pending_pass:
            return
        assert loop.time() < end, run
        await asyncio.sleep(0.01)


_ENDED = {"completed", "failed", "compensated", "compensation_failed", "suspended"}


async def _check(
    store: Store, program: list[Op], fail: bool, hold: int, edit: str | None, at: int
) -> None:
    world = World()
    named = _named(program)
    hold = min(hold, len(named))
    with_hold = [*named[:hold], ("hold", ("hold",)), *named[hold:]]
    code: dict[str, Any] = {"program": with_hold, "fail": fail}
    engine = Engine(store, lease_ttl="5s", recovery_interval="1s")
    engine.workflow("planned")(_body(world, code))
    engine.workflow("leaf")(_leaf_workflow)
    async with engine:
        run_id = await engine.start("planned")
        sent: set[str] = set()
        await _events(engine, run_id, named, sent)
        await _until(
            engine,
            run_id,
            lambda s: "hold" in s.steps and s.steps["hold"].status == "scheduled",
        )
        # The deploy lands between passes: a pass still in flight (one more owed to an
        # earlier event's kick) would replay the old code and could take the hold event.
        await _quiet(engine, store, run_id)
        before = dict(world.succeeded)
        caught, j = False, 0
        if edit is not None:
            edit, j, caught = _plan_edit(hold, len(with_hold), edit, at)
            code["program"] = _edited(with_hold, edit, j)
            await _events(engine, run_id, code["program"], sent)
        await engine.send_event(run_id, "hold", None)
        status = await _until(engine, run_id, lambda s: s.status in _ENDED)
        diverged = status.error is not None and status.error.get("type") == "NonDeterminismError"
        assert diverged == caught, (edit, status.status, status.error)
        if caught:
            assert status.status == "suspended"
            # Nothing of the edit ran: no new or renamed step, no step twice.
            assert all(world.succeeded[k] == before.get(k, 0) for k in world.succeeded), (
                world.succeeded,
                before,
            )
            code["program"] = with_hold  # the fixed deploy
            await engine.resume(run_id)
            status = await _until(engine, run_id, lambda s: s.status in _ENDED - {"suspended"})
            assert status.error is None or status.error["type"] != "NonDeterminismError"
        else:
            assert status.status != "suspended", status
        expected = "completed" if not fail else ("compensated", "failed")
        assert status.status in expected, status
        assert all(n == 1 for n in world.succeeded.values()), world.succeeded
        if edit == "patched_insert":
            # A run that passed the patch point on old code keeps the old path.
            assert ("new" in world.succeeded) == (j > hold)


async def _run(uri: str | None, *args: Any) -> None:
    store: Store = InMemoryStore() if uri is None else await mongo_store(uri)
    try:
        await _check(store, *args)
    finally:
        await store.close()


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


@_settings(30)
@given(program=programs, fail=st.booleans(), hold=st.integers(0, 5))
@pytest.mark.parametrize("store_kind", ["memory", "mongo"])
def test_unchanged_code_never_diverges(
    request: pytest.FixtureRequest, store_kind: str, program: list[Op], fail: bool, hold: int
) -> None:
    uri = request.getfixturevalue("nx_uri") if store_kind == "mongo" else None
    asyncio.run(_run(uri, program, fail, hold, None, 0))


@_settings(40)
@given(
    program=programs,
    fail=st.booleans(),
    hold=st.integers(0, 5),
    edit=st.sampled_from(EDITS),
    at=st.integers(0, 6),
)
@pytest.mark.parametrize("store_kind", ["memory", "mongo"])
def test_an_edit_is_caught_or_patched(
    request: pytest.FixtureRequest,
    store_kind: str,
    program: list[Op],
    fail: bool,
    hold: int,
    edit: str,
    at: int,
) -> None:
    uri = request.getfixturevalue("nx_uri") if store_kind == "mongo" else None
    asyncio.run(_run(uri, program, fail, hold, edit, at))
