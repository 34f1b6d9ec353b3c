"""Values as the code declares them: models, dataclasses, datetimes... cross every
checkpoint as JSON and come back as the declared type, the same on the first pass and on
every replay (also after a restart on MongoDB); a bad input is refused at start."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from engine_core import (
    Engine,
    EngineError,
    InvalidInputError,
    RunNotFoundError,
    StepFailedError,
    WorkflowContext,
)
from engine_core.common import convert
from engine_core.common.values import to_stored
from engine_core.memory import InMemoryStore
from tests.value_types import Colour, Line, OrderIn, Parcel, Receipt

ROOT = Path(__file__).resolve().parents[1]
TZ = timezone(timedelta(hours=2))
ORDER = OrderIn(
    id=uuid.UUID("12345678-1234-5678-1234-567812345678"),
    placed=datetime(2026, 12, 3, 9, 30, 15, 123456, tzinfo=TZ),
    total=Decimal("1234.5600000000000001"),
    colour=Colour.BLUE,
    lines=[Line(sku="a", qty=2)],
    sizes={3, 1, 2},
    pair=(7, "x"),
)
PARCEL = Parcel(Decimal("2.50"), date(2026, 12, 4), ("fragile",), frozenset({4, 5}))


def test_values_round_trip_as_json_and_back_as_their_declared_types() -> None:
    for value, declared in [
        (ORDER, OrderIn),
        (PARCEL, Parcel),
        (ORDER.placed, datetime),
        (date(2026, 1, 2), date),
        (ORDER.id, uuid.UUID),
        (ORDER.total, Decimal),
        (Colour.RED, Colour),
        ((1, "a", 2.5), tuple[int, str, float]),
        ({1, 2, 3}, set[int]),
        ({"k": PARCEL}, dict[str, Parcel]),
        (None, Parcel | None),
    ]:
        stored = to_stored(value, "value")
        assert stored == convert.to_json(value)
        back = convert.from_json(stored, declared)
        assert back == value and type(back) is type(value), (value, back)
    assert convert.from_json(to_stored(ORDER.placed, "v"), datetime).utcoffset() == timedelta(
        hours=2
    )


@pytest.fixture
def without_pydantic(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(convert, "pydantic", None)
    convert._cached_reader.cache_clear()
    yield
    convert._cached_reader.cache_clear()


@pytest.mark.usefixtures("without_pydantic")
def test_without_pydantic_dataclasses_and_standard_types_still_work() -> None:
    for value, declared in [
        (PARCEL, Parcel),
        ([PARCEL, None], list[Parcel | None]),
        (ORDER.placed, datetime),
        ({"d": date(2026, 1, 2)}, dict[str, date]),
        (ORDER.id, uuid.UUID),
        (ORDER.total, Decimal),
        (Colour.RED, Colour),
        ((1, "a"), tuple[int, str]),
        (frozenset({"x", "y"}), frozenset[str]),
    ]:
        back = convert.from_json(to_stored(value, "value"), declared)
        assert back == value and type(back) is type(value), (value, back)
    with pytest.raises(ValueError):
        convert.from_json({"weight": "1", "sent": "not a date"}, Parcel)


def test_a_declared_type_is_read_through_one_cached_adapter() -> None:
    convert._cached_reader.cache_clear()
    for _ in range(3):
        convert.from_json({"sku": "a", "qty": 1}, Line)
    info = convert._cached_reader.cache_info()
    assert (info.misses, info.hits) == (1, 2)


def _register(engine: Engine, seen: list[tuple[str, Any]]) -> None:
    def ship(order: OrderIn) -> Receipt:  # a plain def: runs in a thread
        return Receipt(order=order.id, at=order.placed + timedelta(days=1), parcel=PARCEL)

    async def weigh(parcel: Parcel) -> Parcel:
        return Parcel(parcel.weight * 2, parcel.sent, parcel.tags, parcel.flags)

    def undo(receipt: Receipt) -> None:
        seen.append(("undo", receipt))

    @engine.step_function("price")
    async def price(order: OrderIn) -> Decimal:
        assert isinstance(order, OrderIn)
        return order.total + 1

    @engine.workflow("child")
    async def child(ctx: WorkflowContext, parcel: Parcel) -> tuple[date, Colour]:
        return (parcel.sent, Colour.RED)

    @engine.workflow("order")
    async def order(ctx: WorkflowContext, data: OrderIn) -> Receipt:
        seen.append(("input", data))
        receipt = await ctx.step("ship", ship, data, compensate=undo)
        seen.append(("ship", receipt))
        parcel = await ctx.step("weigh", weigh, PARCEL)
        seen.append(("weigh", parcel))
        seen.append(("stamp", await ctx.step("stamp", lambda: ORDER.placed, returns=datetime)))
        seen.append(("price", await ctx.dispatch("price", price, data)))
        seen.append(("child", await ctx.child("child", child, parcel)))
        seen.append(("event", await ctx.wait_for_event("paid", returns=Receipt)))
        if data.colour is Colour.RED:
            raise RuntimeError("red orders are undone")
        return receipt


def _check_passes(seen: list[tuple[str, Any]]) -> dict[str, list[Any]]:
    """Every pass saw equal values of the same type at each point."""
    by_point: dict[str, list[Any]] = {}
    for point, value in seen:
        by_point.setdefault(point, []).append(value)
    for point, values in by_point.items():
        assert all(v == values[0] and type(v) is type(values[0]) for v in values), point
    return by_point


EXPECTED_TYPES = {
    "input": OrderIn,
    "ship": Receipt,
    "weigh": Parcel,
    "stamp": datetime,
    "price": Decimal,
    "child": tuple,
    "event": Receipt,
}


async def test_every_checkpoint_gives_back_the_declared_type_on_every_pass(
    engine: Engine,
) -> None:
    seen: list[tuple[str, Any]] = []
    _register(engine, seen)
    async with engine:
        run_id = await engine.start("order", ORDER)
        event = Receipt(order=ORDER.id, at=datetime(2026, 1, 1, tzinfo=UTC))
        await engine.send_event(run_id, "paid", event)
        out = await engine.result(run_id, timeout=10)
    assert out == Receipt(order=ORDER.id, at=ORDER.placed + timedelta(days=1), parcel=PARCEL)
    assert type(out) is Receipt
    assert await engine.result(run_id, returns=dict) == out.model_dump(mode="json")
    by_point = _check_passes(seen)
    assert {p: type(v[0]) for p, v in by_point.items()} == EXPECTED_TYPES
    assert len(by_point["input"]) > 1  # replayed at least once
    assert by_point["weigh"][0] == Parcel(Decimal("5.00"), PARCEL.sent, ("fragile",), PARCEL.flags)
    assert by_point["price"][0] == ORDER.total + 1
    assert by_point["child"][0] == (PARCEL.sent, Colour.RED)
    assert by_point["event"][0] == event


async def test_a_compensation_gets_the_declared_type(engine: Engine) -> None:
    seen: list[tuple[str, Any]] = []
    _register(engine, seen)
    red = ORDER.model_copy(update={"colour": Colour.RED})
    async with engine:
        run_id = await engine.start("order", red)
        await engine.send_event(run_id, "paid", None)
        with pytest.raises(EngineError):
            await engine.result(run_id, timeout=10)
    undone = [v for p, v in seen if p == "undo"]
    assert len(undone) == 1 and type(undone[0]) is Receipt


async def test_a_bad_input_is_refused_at_start_and_nothing_is_recorded(engine: Engine) -> None:
    _register(engine, [])
    with pytest.raises(InvalidInputError) as caught:
        await engine.start("order", {"id": "not a uuid"}, run_id="bad")
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, EngineError)
    assert caught.value.errors and "id" in str(caught.value.errors)
    with pytest.raises(RunNotFoundError):
        await engine.status("bad")
    # The JSON form of a valid input is accepted as well.
    await engine.start("order", ORDER.model_dump(mode="json"), run_id="good")


@pytest.mark.usefixtures("without_pydantic")
async def test_dataclasses_cross_checkpoints_without_pydantic() -> None:
    engine = Engine(InMemoryStore())

    async def heavier(parcel: Parcel) -> Parcel:
        return Parcel(parcel.weight + 1, parcel.sent, parcel.tags, parcel.flags)

    @engine.workflow("parcel")
    async def flow(ctx: WorkflowContext, parcel: Parcel) -> tuple[Parcel, uuid.UUID]:
        bigger = await ctx.step("heavier", heavier, parcel)
        await ctx.sleep("nap", 0.01)
        return (bigger, ORDER.id)

    async with engine:
        run_id = await engine.start("parcel", PARCEL)
        out = await engine.result(run_id, timeout=10)
        with pytest.raises(InvalidInputError):
            await engine.start("parcel", {"weight": "1"})
    assert out == (Parcel(Decimal("3.50"), PARCEL.sent, ("fragile",), PARCEL.flags), ORDER.id)


async def _until(engine: Engine, run_id: str, check: Any) -> None:
    for _ in range(200):
        if check(await engine.status(run_id)):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(await engine.status(run_id))


def _versioned(engine: Engine, declared: Any) -> None:
    def measure() -> Any:
        return {"sku": "a", "qty": 1}

    measure.__annotations__["return"] = declared

    @engine.workflow("versioned")
    async def versioned(ctx: WorkflowContext, data: Any) -> Any:
        line = await ctx.step("measure", measure)
        await ctx.wait_for_event("go")
        return line


async def test_a_recorded_value_that_no_longer_fits_suspends_the_run(
    make_engine: Callable[..., Engine],
) -> None:
    old = make_engine()
    _versioned(old, dict[str, Any])
    async with old:
        run_id = await old.start("versioned")
        await _until(old, run_id, lambda s: s.steps.get("go") is not None)
    changed = make_engine()
    _versioned(changed, Parcel)  # the step's result is now declared as something else
    async with changed:
        await changed.send_event(run_id, "go")
        await _until(changed, run_id, lambda s: s.status == "suspended")
    status = await changed.status(run_id)
    assert status.error is not None and status.error["type"] == "NonDeterminismError"
    assert "the result of step 'measure'" in status.error["message"]
    fixed = make_engine()
    _versioned(fixed, Line)
    async with fixed:
        await fixed.resume(run_id)
        assert await fixed.result(run_id, timeout=10) == {"sku": "a", "qty": 1}
    assert (await fixed.status(run_id)).steps["measure"].attempts == 1  # never run again


async def test_a_fresh_result_that_does_not_fit_its_declared_type_fails_the_step(
    engine: Engine,
) -> None:
    calls: list[int] = []

    def count() -> int:
        calls.append(1)
        return "many"  # type: ignore[return-value]

    @engine.workflow("miscounted")
    async def miscounted(ctx: WorkflowContext, data: Any) -> Any:
        try:
            return await ctx.step("count", count, retries=2)
        except StepFailedError as exc:
            return ["failed", exc.error_type]

    async with engine:
        run_id = await engine.start("miscounted")
        assert await engine.result(run_id, timeout=10) == ["failed", "NotSerializableError"]
        status = await engine.status(run_id)
    step = status.steps["count"]
    assert (step.status, step.attempts, len(calls)) == ("failed", 1, 1)  # not retried
    assert step.error is not None and "does not fit the type the code declares (int)" in str(
        step.error["message"]
    )


def test_engine_core_imports_and_converts_without_pydantic_installed() -> None:
    code = """
import sys
sys.modules["pydantic"] = None  # as if not installed: importing it raises ImportError
import asyncio, dataclasses, datetime
from engine_core import Engine, WorkflowContext
from engine_core.common import convert
from engine_core.memory import InMemoryStore
assert convert.pydantic is None

@dataclasses.dataclass
class Box:
    at: datetime.datetime
    size: tuple[int, int]

engine = Engine(InMemoryStore())

def grow(box: Box) -> Box:
    return Box(box.at, (box.size[0] + 1, box.size[1]))

@engine.workflow("box")
async def flow(ctx: WorkflowContext, box: Box) -> Box:
    return await ctx.step("grow", grow, box)

async def main() -> None:
    at = datetime.datetime(2026, 1, 2, 3, 4, tzinfo=datetime.timezone.utc)
    async with engine:
        out = await engine.result(await engine.start("box", Box(at, (1, 2))), timeout=10)
    assert out == Box(at, (2, 2)), out

asyncio.run(main())
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.strip() == "ok", done.stderr
