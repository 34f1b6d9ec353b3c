"""What the store learns from the server itself: is it there, what is it, what time is it.

* :func:`ensure_reachable` answers quickly and in one line whether any server answers
  (the CLI's first command);
* :func:`topology` reads ``hello``: standalone, replica set, sharded (``mongos``),
  an arbiter, or a replica set member not yet initialised;
* :func:`measure_clock_offset` compares this host's clock with the server's ``hello``
  ``localTime``, corrected by half the round trip;
* :func:`ttl_monitor` asks whether the server deletes TTL-expired documents itself.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from bson.codec_options import CodecOptions
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import ConnectionFailure

from pikku_mongo.errors import ServerUnreachableError

_CODEC: CodecOptions[dict[str, Any]] = CodecOptions(document_class=dict, tz_aware=True, tzinfo=UTC)
#: BSON dates have millisecond resolution: ``localTime`` is up to 1 ms behind the clock.
DATE_RESOLUTION_S = 0.001

#: The clock compared with the server's (a seam for tests).
wall_clock: Callable[[], float] = time.time

Topology = Literal["standalone", "replica set", "sharded", "arbiter", "uninitialised"]


@dataclass(frozen=True)
class ClockOffset:
    """This host's clock against the server's.

    ``offset``: seconds this host's clock is ahead of the server's (negative: behind).
    The true offset lies within ``offset ± uncertainty``: half the round trip of the
    best sample (the server read its clock somewhere between our send and our receive)
    plus half a millisecond (``localTime`` is truncated to the millisecond, so the
    server's reading is taken as the middle of its millisecond).
    """

    offset: float
    uncertainty: float
    rtt: float
    samples: int

    def beyond(self, bound: float) -> bool:
        """Whether the offset certainly exceeds ``bound`` seconds, either way."""
        return abs(self.offset) - self.uncertainty > bound


async def hello(database: AsyncDatabase[Any]) -> dict[str, Any]:
    """The server's ``hello`` reply (times timezone-aware)."""
    reply: dict[str, Any] = await database.command("hello", codec_options=_CODEC)
    return reply


def topology(reply: dict[str, Any]) -> Topology:
    """What kind of deployment answered ``hello``."""
    if reply.get("msg") == "isdbgrid":
        return "sharded"
    if reply.get("arbiterOnly"):
        return "arbiter"
    if reply.get("setName"):
        return "replica set"
    if reply.get("isreplicaset"):
        return "uninitialised"
    return "standalone"


async def measure_clock_offset(
    database: AsyncDatabase[Any], samples: int = 5
) -> ClockOffset | None:
    """Sample ``hello`` ``samples`` times and keep the sample with the shortest round
    trip (the tightest bound). None when the server reports no ``localTime``."""
    best: tuple[float, float] | None = None  # (rtt, offset)
    taken = 0
    for _ in range(max(1, samples)):
        sent_wall, sent = wall_clock(), time.perf_counter()
        reply = await hello(database)
        rtt = time.perf_counter() - sent
        local_time = reply.get("localTime")
        if not isinstance(local_time, datetime):
            return None
        if local_time.tzinfo is None:
            local_time = local_time.replace(tzinfo=UTC)
        taken += 1
        offset = sent_wall + rtt / 2 - (local_time.timestamp() + DATE_RESOLUTION_S / 2)
        if best is None or rtt < best[0]:
            best = (rtt, offset)
    assert best is not None
    rtt, offset = best
    return ClockOffset(
        offset=offset, uncertainty=rtt / 2 + DATE_RESOLUTION_S / 2, rtt=rtt, samples=taken
    )


_NOISE = (
    re.compile(r",?\s*Timeout: [^,]*, Topology Description: .*$", re.DOTALL),
    re.compile(r", full error: .*$", re.DOTALL),
    re.compile(r"\s*\(configured timeouts: [^)]*\)"),
)


async def ttl_monitor(database: AsyncDatabase[Any]) -> bool:
    """Whether the server runs a TTL monitor (deletes documents past a TTL index's field
    by itself): MongoDB answers ``getParameter`` ``ttlMonitorEnabled`` (or, where a user
    may not ask that, reports its monitor's passes in ``serverStatus``). The test servers
    (nx-27017, mongoeco) answer neither: they hide an expired document from queries
    without deleting it. Not known: False (the recovery pass then deletes expired runs)."""
    admin = database.client.admin
    try:
        reply = await admin.command({"getParameter": 1, "ttlMonitorEnabled": 1})
        if "ttlMonitorEnabled" in reply:
            return reply["ttlMonitorEnabled"] is True
    except Exception:  # not MongoDB, or not allowed: ask the other way
        pass
    try:
        status = await admin.command("serverStatus")
    except Exception:
        return False
    ttl = (status.get("metrics") or {}).get("ttl") or {}
    return isinstance(ttl, dict) and "passes" in ttl


def short_reason(exc: BaseException) -> str:
    """The driver's error cut to one line: no topology description, no timeouts list."""
    text = str(exc)
    for pattern in _NOISE:
        text = pattern.sub("", text)
    text = " ".join(text.split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:199] + "…"


async def ensure_reachable(database: AsyncDatabase[Any], uri: str, timeout: float) -> None:
    """``ping`` the server, once, waiting at most ``timeout`` seconds; raise
    :class:`ServerUnreachableError` (one line) when nothing answers. ``uri`` is the
    address shown in the message, credentials already removed."""
    try:
        await asyncio.wait_for(database.command("ping"), timeout)
    except TimeoutError:
        raise ServerUnreachableError(uri, f"no answer within {timeout:g} s") from None
    except ConnectionFailure as exc:
        raise ServerUnreachableError(uri, short_reason(exc)) from None
