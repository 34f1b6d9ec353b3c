"""A client without the workflow code (an API tier) against a fleet of workers
(docs/guides/workers.md): a start by name takes the version the live fleet serves and
checks the input against the schema the workers publish; a worker that meets an input
its type refuses fails the run with ``InvalidInputError``."""

from __future__ import annotations

import asyncio
import datetime as dt
import enum
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Literal

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine_core import (
    Engine,
    InvalidInputError,
    RunNotFoundError,
    WorkflowContext,
    WorkflowRunFailedError,
)
from engine_core.fleet.registry import why_undriven
from engine_core.fleet.schemas import check_input_schema
from engine_core.flow.starts import new_run


class Size(enum.Enum):
    SMALL = "s"
    LARGE = "l"


class Line(pydantic.BaseModel):
    sku: str
    qty: int = pydantic.Field(ge=1)


class Order(pydantic.BaseModel):
    order_id: str
    lines: list[Line]
    size: Size = Size.SMALL
    placed: dt.datetime | None = None
    total: Decimal = Decimal(0)
    express: bool = False
    ref: uuid.UUID | None = None


class Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    kind: Literal["a", "b"]
    weight: float


async def echo(ctx: WorkflowContext, data: Any) -> Any:
    return data


def serve_order(engine: Engine, version: str | None = None) -> None:
    @engine.workflow("order", version=version)
    async def order(ctx: WorkflowContext, data: Order) -> str:
        await ctx.step("pack", lambda: data.order_id)
        return f"{version}:{data.order_id}:{len(data.lines)}"


async def _wait_listed(client: Engine, count: int) -> None:
    for _ in range(200):
        if len(await client.list_workers()) == count:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(await client.list_workers())


async def test_a_start_by_name_takes_the_version_of_the_newest_worker_and_is_driven(
    make_engine: Callable[..., Engine],
) -> None:
    """Pinned workers of v1 and v2: the tier's start takes v2 (the newest worker's), is
    stated on the run, and is driven; a start recorded with no version (an older
    client) is a run no live worker will drive, and says why."""
    old, new = make_engine(pin_versions=True), make_engine(pin_versions=True)
    tier = make_engine()
    serve_order(old, "v1")
    serve_order(new, "v2")
    async with old:
        await _wait_listed(tier, 1)
        async with new:
            (first, second) = await tier.list_workers()
            assert second.started_at >= first.started_at
            assert (second.pinned, second.workflow_versions) == (True, {"order": "v2"})
            run_id = await tier.start("order", {"order_id": "x", "lines": []})
            assert (await tier.status(run_id)).version == "v2"
            assert await tier.result(run_id, timeout=10) == "v2:x:0"
            workers = await tier.list_workers()
            assert why_undriven("order", "v2", workers) is None
            assert why_undriven("order", "v1", workers) is None
            lost = why_undriven("order", None, workers)
            assert lost is not None and "pin versions" in lost and "'v1'" not in lost
            assert "v1, v2" in lost
            assert why_undriven("refund", None, workers) == (
                "no live worker registers workflow 'refund'"
            )


async def test_an_unpinned_fleet_drives_a_start_by_name_of_any_version(
    make_engine: Callable[..., Engine],
) -> None:
    worker, tier = make_engine(), make_engine()
    serve_order(worker, "v3")
    async with worker:
        run_id = await tier.start("order", {"order_id": "y", "lines": []})
        assert (await tier.status(run_id)).version == "v3"
        assert await tier.result(run_id, timeout=10) == "v3:y:0"
        assert why_undriven("order", None, await tier.list_workers()) is None


async def test_workers_publish_input_schemas_and_a_client_refuses_what_does_not_fit(
    make_engine: Callable[..., Engine],
) -> None:
    worker, tier = make_engine(), make_engine()
    serve_order(worker)
    worker.workflow("untyped")(echo)  # declares no input type: no schema
    async with worker:
        (listed,) = await tier.list_workers()
        assert set(listed.input_schemas) == {"order"}  # "untyped" declares nothing
        assert "order_id" in listed.input_schemas["order"]["required"]
        with pytest.raises(InvalidInputError) as caught:
            await tier.start("order", {"order_id": "x"}, run_id="bad")
        assert "lines" in str(caught.value) and "field required" in str(caught.value)
        assert caught.value.errors == [
            {"loc": ["lines"], "msg": "field required", "type": "missing"}
        ]
        with pytest.raises(RunNotFoundError):
            await tier.status("bad")
        with pytest.raises(InvalidInputError, match=r"lines\.0\.qty"):
            await tier.start("order", {"order_id": "x", "lines": [{"sku": "a", "qty": 0}]})
        good = {"order_id": "x", "lines": [{"sku": "a", "qty": "2"}], "size": "l"}
        assert await tier.result(await tier.start("order", good), timeout=10) == "None:x:1"
        assert await tier.result(await tier.start("untyped", [1]), timeout=10) == [1]


async def test_a_worker_fails_a_run_whose_input_its_type_refuses(
    make_engine: Callable[..., Engine],
) -> None:
    """A run recorded without a check (by a client that read no schema): the worker
    fails it with InvalidInputError before any step, never suspends it as diverged."""
    worker = make_engine()
    serve_order(worker)
    run = new_run("order", {"order_id": "x"}, run_id="unchecked", started_by="old-client",
                  queues={})  # fmt: skip
    await worker.store.insert_run(run)
    await worker.drive("unchecked")
    with pytest.raises(WorkflowRunFailedError, match="does not fit Order"):
        await worker.result("unchecked", timeout=10)
    status = await worker.status("unchecked")
    assert status.status == "failed" and status.steps == {}
    assert status.error is not None and status.error["type"] == "InvalidInputError"
    assert "lines" in status.error["message"]


def _pydantic_takes(model: type[pydantic.BaseModel], value: Any) -> bool:
    try:
        pydantic.TypeAdapter(model).validate_python(value)
    except pydantic.ValidationError:
        return False
    return True


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.floats(-3, 3)
    | st.text(max_size=4)
    | st.sampled_from(["s", "l", "a", "b", "2", "1.5", "true", "2026-12-03T10:00:00Z"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["sku", "qty", "kind", "weight", "x"]), inner, max_size=3)
    ),
    max_leaves=8,
)
_order = st.fixed_dictionaries(
    {"order_id": _json, "lines": st.lists(_json, max_size=2)},
    optional={"size": _json, "placed": _json, "total": _json, "express": _json, "ref": _json},
)


@settings(max_examples=300, deadline=None)
@given(value=st.one_of(_order, _json), which=st.sampled_from([Order, Strict, Line]))
def test_the_schema_check_refuses_only_what_the_worker_would_refuse(
    value: Any, which: type[pydantic.BaseModel]
) -> None:
    schema = pydantic.TypeAdapter(which).json_schema()
    try:
        check_input_schema("w", schema, value)
    except InvalidInputError:
        assert not _pydantic_takes(which, value), value
