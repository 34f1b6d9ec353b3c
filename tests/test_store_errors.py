"""pikku_mongo's error surface without a server: size refusals are specific and never
retried, other non-transient errors surface at once, transient ones are retried, and an
outage is logged once and waited out (``engine_core.common.outages``)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pymongo.errors import (
    AutoReconnect,
    BulkWriteError,
    DocumentTooLarge,
    OperationFailure,
    ServerSelectionTimeoutError,
)

import engine_core.common.outages
from engine_core.common.outages import Outages
from engine_core.errors import StoreUnavailableError
from pikku_mongo.errors import DocumentTooLargeError, ServerUnreachableError
from pikku_mongo.wire.retry import surface_oversize, too_large, transient_retry
from pikku_mongo.wire.server import short_reason


@pytest.mark.parametrize(
    "exc",
    [
        DocumentTooLarge("BSON document too large (17825930 bytes)"),
        OperationFailure("object to insert too large", code=10334),
        OperationFailure("Resulting document after update is larger than 16777216", code=17419),
        OperationFailure("Document to upsert is larger than 16777216", code=17420),
        BulkWriteError({"writeErrors": [{"index": 0, "code": 10334, "errmsg": "too large"}]}),
    ],
)
def test_size_refusals_are_recognised(exc: Exception) -> None:
    assert too_large(exc)


@pytest.mark.parametrize(
    "exc",
    [
        OperationFailure("bad", code=2),
        AutoReconnect("gone"),
        BulkWriteError({"writeErrors": [{"index": 0, "code": 11000, "errmsg": "dup"}]}),
        ValueError("x"),
    ],
)
def test_other_errors_are_not_size_refusals(exc: Exception) -> None:
    assert too_large(exc) is None


def counting(*errors: Exception) -> tuple[Any, list[int]]:
    calls: list[int] = []

    async def op() -> str:
        calls.append(1)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return "ok"

    return op, calls


async def test_a_size_refusal_surfaces_at_once_as_its_own_error() -> None:
    op, calls = counting(OperationFailure("Resulting document ... larger", code=17419))
    with pytest.raises(DocumentTooLargeError) as caught:
        await transient_retry(op)()
    assert calls == [1]
    assert isinstance(caught.value.__cause__, OperationFailure)
    op, calls = counting(DocumentTooLarge("too large"))
    with pytest.raises(DocumentTooLargeError):
        await surface_oversize(op)()
    assert calls == [1]


async def test_non_transient_errors_surface_at_once_and_transient_ones_are_retried() -> None:
    op, calls = counting(OperationFailure("bad value", code=2))
    with pytest.raises(OperationFailure, match="bad value"):
        await transient_retry(op)()
    assert calls == [1]
    op, calls = counting(AutoReconnect("a"), AutoReconnect("b"))
    assert await transient_retry(op)() == "ok"
    assert calls == [1, 1, 1]


def test_driver_errors_cut_to_one_line() -> None:
    exc = ServerSelectionTimeoutError(
        "127.0.0.1:1: [Errno 111] Connection refused (configured timeouts: socketTimeoutMS: "
        "20000.0ms, connectTimeoutMS: 20000.0ms), Timeout: 5.0s, Topology Description: "
        "<TopologyDescription id: 1, topology_type: Unknown, servers: [<ServerDescription "
        "('127.0.0.1', 1) server_type: Unknown,\nrtt: None>]>"
    )
    assert short_reason(exc) == "127.0.0.1:1: [Errno 111] Connection refused"
    failure = OperationFailure("Unsupported stage", code=1, details={"ok": 0, "errmsg": "x"})
    assert "full error" not in short_reason(failure)
    err = ServerUnreachableError("mongodb://***@h:1/db", "timed out")
    assert str(err) == "cannot reach the MongoDB server at mongodb://***@h:1/db (timed out)"
    assert isinstance(err, ConnectionError)


async def test_an_outage_is_two_lines_and_is_waited_out(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine_core.common.outages, "FIRST_WAIT_S", 0.001)
    monkeypatch.setattr(engine_core.common.outages, "LAST_WAIT_S", 0.002)
    outages = Outages()
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls <= 50:
            raise StoreUnavailableError("connection refused")
        return "back"

    with caplog.at_level(logging.INFO, logger="engine_core.outage"):
        assert await outages.call(flaky) == "back"
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "unavailable" in lines[0] and "connection refused" in lines[0]
    assert "back after" in lines[1] and "50 calls failed" in lines[1]
    assert not outages.down


async def test_a_caller_waits_only_as_long_as_it_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_core.common.outages, "FIRST_WAIT_S", 0.01)

    async def down() -> None:
        raise StoreUnavailableError("connection refused")

    with pytest.raises(StoreUnavailableError):
        await Outages().call(down, timeout=0.1)
