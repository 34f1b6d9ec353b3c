"""Lease and claim expiry under a clock skew bound, and the clock offset probe.

Two hosts are simulated by two stores whose clocks (``utcnow`` of the store's parts) are
set per call: a holder on one clock, a taker on another that runs up to the bound ahead
of it or behind it.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from engine_core.errors import InvalidDurationError
from engine_core.records import StepRecord, utcnow
from pikku_mongo import MongoStore
from pikku_mongo.errors import LeaseTooShortError
from pikku_mongo.wire.server import ClockOffset, measure_clock_offset
from tests.conftest import mongo_store

SKEW = 1.0
TTL = 10.0


class Clocks:
    """The time each simulated host reads: ``real`` plus that host's offset."""

    def __init__(self) -> None:
        self.real = utcnow()
        self.offset = 0.0

    def now(self) -> datetime:
        return self.real + timedelta(seconds=self.offset)

    def at(self, seconds: float, offset: float = 0.0) -> None:
        self.real = self.start + timedelta(seconds=seconds)
        self.offset = offset

    def begin(self) -> None:
        self.start = self.real


@pytest.fixture
def clocks(monkeypatch: pytest.MonkeyPatch) -> Clocks:
    made = Clocks()
    made.begin()
    for module in ("lease_ops", "step_ops", "run_ops", "queue_ops"):
        monkeypatch.setattr(f"pikku_mongo.store.{module}.utcnow", made.now)
    return made


@pytest.fixture
async def skewed(nx_uri: str) -> AsyncIterator[MongoStore]:
    store = await mongo_store(nx_uri, max_clock_skew=f"{SKEW}s")
    yield store
    await store.close()


def test_the_bound_is_a_duration_and_has_a_default() -> None:
    from pymongo import AsyncMongoClient

    db = AsyncMongoClient("mongodb://127.0.0.1:1/", connect=False).get_database("x")
    assert MongoStore(db).max_clock_skew == 1.0
    assert MongoStore(db, max_clock_skew="250ms").max_clock_skew == 0.25
    assert MongoStore(db, max_clock_skew=0).max_clock_skew == 0.0
    with pytest.raises(InvalidDurationError):
        MongoStore(db, max_clock_skew="soon")


async def test_a_holder_counts_its_lease_lost_early_and_a_taker_waits_past_it(
    skewed: MongoStore, clocks: Clocks
) -> None:
    lease = await skewed.acquire_lease("k", "holder", TTL)
    assert lease is not None
    # The holder is told its lease ends one skew early.
    assert lease.expires_at == clocks.start + timedelta(seconds=TTL - SKEW)
    clocks.at(TTL - SKEW - 0.01)
    renewed = await skewed.refresh_lease(lease, TTL)
    assert renewed is not None  # still its own (stored expiry moved on)
    stored_end = TTL - SKEW - 0.01 + TTL
    clocks.at(stored_end - SKEW + 0.01)
    assert await skewed.refresh_lease(renewed, TTL) is None  # the holder counts it lost
    clocks.at(stored_end + SKEW - 0.01)
    assert await skewed.acquire_lease("k", "taker", TTL) is None  # not yet for a taker
    clocks.at(stored_end + SKEW)
    taken = await skewed.acquire_lease("k", "taker", TTL)
    assert taken is not None and taken.token == lease.token + 1


@pytest.mark.parametrize("taker_offset", [-SKEW, -0.4, 0.0, 0.4, SKEW])
async def test_no_two_hosts_within_the_bound_ever_hold_a_lease_at_once(
    skewed: MongoStore, clocks: Clocks, taker_offset: float
) -> None:
    """The holder's last moment as holder comes before the taker's first, in real time,
    for any taker clock within the bound."""
    lease = await skewed.acquire_lease("k", "holder", TTL)
    assert lease is not None
    holder_last = (lease.expires_at - clocks.start).total_seconds()
    first_take = None
    for tenth in range(int(TTL * 10), int((TTL + 3 * SKEW) * 10)):
        clocks.at(tenth / 10, offset=taker_offset)
        if await skewed.acquire_lease("k", "taker", TTL) is not None:
            first_take = tenth / 10
            break
    assert first_take is not None
    assert holder_last < first_take
    assert first_take >= TTL  # never before the stored expiry in real time


async def test_claims_lapse_a_skew_late_and_stop_extending_a_skew_early(
    skewed: MongoStore, clocks: Clocks
) -> None:
    now = clocks.now()
    await skewed.insert_step(
        StepRecord(
            run_id="r", key="s", kind="dispatch", status="scheduled", due_at=now,
            function="fn", max_attempts=3, scheduled_at=now, updated_at=now,
        )
    )  # fmt: skip
    [claimed] = await skewed.claim_steps(["fn"], holder="w", claim_ttl=TTL, limit=1)
    assert claimed.attempts == 1
    clocks.at(TTL - SKEW - 0.01)
    assert await skewed.extend_claim("r", "s", holder="w", attempt=1, claim_ttl=TTL)
    stored_end = TTL - SKEW - 0.01 + TTL
    clocks.at(stored_end - SKEW + 0.01)
    assert not await skewed.extend_claim("r", "s", holder="w", attempt=1, claim_ttl=TTL)
    clocks.at(stored_end + SKEW - 0.01)
    assert await skewed.requeue_lapsed_claims() == 0
    clocks.at(stored_end + SKEW + 0.01)
    assert await skewed.requeue_lapsed_claims() == 1


async def test_a_ttl_the_bound_would_eat_is_refused(skewed: MongoStore) -> None:
    with pytest.raises(LeaseTooShortError, match="twice max_clock_skew"):
        await skewed.acquire_lease("k", "h", 1.5)
    with pytest.raises(LeaseTooShortError):
        await skewed.claim_steps(["fn"], holder="w", claim_ttl=1, limit=1)
    assert await skewed.acquire_lease("k", "h", 2 * SKEW) is not None
    assert isinstance(LeaseTooShortError("x"), ValueError)


@pytest.fixture(params=["nx", "mongoeco"])
async def any_store(request: pytest.FixtureRequest) -> AsyncIterator[MongoStore]:
    store = await mongo_store(request.getfixturevalue(f"{request.param}_uri"))
    yield store
    await store.close()


async def test_the_offset_from_the_server_is_measured(any_store: MongoStore) -> None:
    measured = await any_store.clock_offset(samples=4)
    assert measured is not None and measured.samples == 4
    # Same host as the server: the offset is within the measurement's own uncertainty.
    assert abs(measured.offset) <= measured.uncertainty + 0.005
    assert 0 < measured.rtt < 1 and measured.uncertainty >= measured.rtt / 2


async def test_a_clock_off_by_more_than_half_the_bound_is_a_warning(
    nx_uri: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = await mongo_store(nx_uri, max_clock_skew="1s")
    try:
        ahead: Callable[[], float] = lambda: time.time() + 0.8  # noqa: E731
        monkeypatch.setattr("pikku_mongo.wire.server.wall_clock", ahead)
        with caplog.at_level(logging.WARNING, logger="pikku_mongo.store.mongo_store"):
            measured = await store.clock_offset()
        assert measured is not None and 0.7 < measured.offset < 0.9
        assert measured.beyond(0.5) and not measured.beyond(1.0)
        assert any("off the MongoDB server" in r.getMessage() for r in caplog.records)
        caplog.clear()
        # init measures too, and a failed measurement never fails init.
        with caplog.at_level(logging.WARNING, logger="pikku_mongo.store.mongo_store"):
            await store.init()
        # The server's clock reads in whole milliseconds, so 0.8 s may show as +0.799.
        stated = [re.search(r"is \+(\d\.\d+) s", r.getMessage()) for r in caplog.records]
        assert any(m is not None and 0.7 < float(m.group(1)) < 0.9 for m in stated)
    finally:
        await store.close()


async def test_no_local_time_means_no_measurement() -> None:
    class Quiet:
        async def command(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            return {"ok": 1}

    assert await measure_clock_offset(Quiet(), samples=2) is None  # type: ignore[arg-type]


def test_beyond_takes_the_uncertainty_into_account() -> None:
    off = ClockOffset(offset=-0.6, uncertainty=0.15, rtt=0.3, samples=3)
    assert off.beyond(0.4) and not off.beyond(0.5)
