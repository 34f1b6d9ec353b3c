"""``pikku-mongo doctor``: does this deployment give the store the guarantees it relies on?

:func:`diagnose` runs every check against a store's server and returns a
:class:`DoctorReport`: a list of :class:`Check` (``ok`` / ``warn`` / ``fail``, one line
each, plus data). A ``fail`` breaks a guarantee (the CLI exits non-zero); a ``warn``
deserves a look (a standalone server, as in the tests, is one). The checks:

* ``server``: version (MongoDB 5.0 or later) and wire version;
* ``topology``: standalone, replica set (arbiters?), sharded, from ``hello``;
* ``write concern`` / ``read concern``: what the store's collections use, and whether
  the server accepts them (one insert and one read on a scratch collection);
* ``change streams``: whether ``watch()`` delivers an event (a wake-up hint only);
* ``indexes`` / ``TTL index``: the store's indexes against :mod:`pikku_mongo.wire.indexes`;
* ``clock``: this host's offset from the server (the mongos clock through a router)
  against ``max_clock_skew``;
* ``storage format``, ``unique indexes``, ``shard keys``: see
  :mod:`pikku_mongo.doctor.shards`.

The scratch collection (``<prefix>doctor_<random>``) is dropped afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import PyMongoError, WTimeoutError

from pikku_mongo.doctor.fleet import fleet_checks
from pikku_mongo.doctor.report import Check, DoctorReport
from pikku_mongo.doctor.shards import shard_checks
from pikku_mongo.wire.indexes import EVENT_INDEXES, LEASE_TTL_INDEX, RUN_INDEXES, STEP_INDEXES
from pikku_mongo.wire.server import hello, short_reason, topology, ttl_monitor

if TYPE_CHECKING:
    from pymongo import IndexModel

    from pikku_mongo.store.mongo_store import MongoStore

#: The oldest MongoDB the store is built for (docs/guides/mongodb.md, Portability).
MIN_VERSION = (5, 0)


async def diagnose(store: MongoStore, *, change_stream_timeout: float = 3.0) -> DoctorReport:
    """Every check against ``store``'s server. A check that cannot run is a ``fail``
    naming the error; the report always holds every check."""
    scratch = store.database.get_collection(f"{store.prefix}doctor_{uuid.uuid4().hex[:8]}")
    checks: list[Check] = []
    reply: dict[str, Any] = {}

    async def run(name: str, check: Callable[[], Awaitable[Check]]) -> None:
        try:
            checks.append(await check())
        except Exception as exc:
            checks.append(Check(name, "fail", f"could not check: {short_reason(exc)}"))

    async def server() -> Check:
        reply.update(await hello(store.database))
        return await _server(store, reply)

    try:
        await run("server", server)
        await run("topology", lambda: _topology(reply))
        await run("write concern", lambda: _write_concern(store, scratch))
        await run("read concern", lambda: _read_concern(store, scratch))
        await run("change streams", lambda: _change_streams(scratch, change_stream_timeout))
        await run("indexes", lambda: _indexes(store))
        await run("TTL index", lambda: _ttl_index(store))
        await run("retention", lambda: _retention(store))
        await run("clock", lambda: _clock(store, topology(reply)))
        try:
            checks.extend(await shard_checks(store, topology(reply)))
        except Exception as exc:
            checks.append(Check("shard keys", "fail", f"could not check: {short_reason(exc)}"))
        try:
            checks.extend(await fleet_checks(store))
        except Exception as exc:
            checks.append(Check("workers", "fail", f"could not check: {short_reason(exc)}"))
    finally:
        with contextlib.suppress(PyMongoError):
            await scratch.drop()
    return DoctorReport(checks)


# ---- the checks ---------------------------------------------------------------------


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


async def _server(store: MongoStore, reply: dict[str, Any]) -> Check:
    version = str(reply.get("version") or "")
    if not version:
        info: dict[str, Any] = await store.database.command("buildInfo")
        version = str(info.get("version") or "unknown")
    wire = reply.get("maxWireVersion")
    data = {"version": version, "max_wire_version": wire}
    parsed = _version_tuple(version)
    if parsed and parsed[:2] < MIN_VERSION:
        return Check(
            "server",
            "fail",
            f"MongoDB {version}: the store needs MongoDB "
            f"{'.'.join(map(str, MIN_VERSION))} or later",
            data,
        )
    return Check("server", "ok", f"MongoDB {version} (wire version {wire})", data)


async def _topology(reply: dict[str, Any]) -> Check:
    kind = topology(reply)
    hosts = [str(h) for h in reply.get("hosts") or []]
    arbiters = [str(h) for h in reply.get("arbiters") or []]
    data: dict[str, Any] = {"topology": kind, "set_name": reply.get("setName")}
    if kind == "standalone":
        return Check(
            "topology",
            "warn",
            "standalone server: 'majority' is this one server, so nothing survives losing "
            "its disk; use a replica set in production",
            data,
        )
    if kind == "arbiter":
        return Check(
            "topology", "fail", "connected to an arbiter, which holds no data: connect to "
            "the replica set (or its primary) instead", data
        )  # fmt: skip
    if kind == "uninitialised":
        return Check(
            "topology",
            "fail",
            "a replica set member that is not initialised yet (run rs.initiate())",
            data,
        )
    if kind == "sharded":
        return Check("topology", "ok", "sharded cluster (connected to mongos)", data)
    data.update(hosts=hosts, arbiters=arbiters, primary=reply.get("primary"))
    where = f"replica set {reply.get('setName')!r}: {len(hosts)} data-bearing member(s)"
    if arbiters:
        return Check(
            "topology",
            "warn",
            f"{where} and {len(arbiters)} arbiter(s): with a data-bearing member down, "
            "'majority' writes time out and majority reads fall behind; prefer three "
            "data-bearing members",
            data,
        )
    if len(hosts) < 3:
        return Check(
            "topology",
            "warn",
            f"{where}: with fewer than three, losing one member stops 'majority' writes",
            data,
        )
    return Check("topology", "ok", f"{where}, primary {reply.get('primary')}", data)


async def _write_concern(store: MongoStore, scratch: AsyncCollection[Any]) -> Check:
    concern = store.write_concern.document
    data: dict[str, Any] = {"write_concern": concern}
    shown = _concern_text(concern) or "server default"
    w, journal, wtimeout = concern.get("w"), concern.get("j"), concern.get("wtimeout")
    if w == 0:
        return Check(
            "write concern",
            "fail",
            f"{shown}: unacknowledged writes cannot report whether a guard held",
            data,
        )
    probe = scratch.with_options(write_concern=store.write_concern)
    try:
        await probe.insert_one({"_id": "doctor", "at": time.time()})
    except WTimeoutError as exc:
        return Check(
            "write concern",
            "fail",
            f"{shown}: no majority acknowledged a write within wtimeout ({short_reason(exc)})",
            data,
        )
    except PyMongoError as exc:
        return Check(
            "write concern",
            "fail",
            f"{shown}: the server refuses it ({short_reason(exc)}); pass "
            "MongoStore(write_concern=...)",
            data,
        )
    if w != "majority":
        return Check(
            "write concern",
            "warn",
            f"{shown}: a failover can roll back an acknowledged write (a finished step "
            "would run again); the default is majority, journaled",
            data,
        )
    if journal is False:
        return Check("write concern", "warn", f"{shown}: not journaled, a crash can lose it", data)
    if not wtimeout:
        return Check(
            "write concern",
            "warn",
            f"{shown}: no wtimeout, so a write waits forever while no majority is up",
            data,
        )
    return Check("write concern", "ok", f"{shown} (accepted by the server)", data)


async def _read_concern(store: MongoStore, scratch: AsyncCollection[Any]) -> Check:
    concern = store.read_concern.document
    level = concern.get("level") or "server default (local)"
    data: dict[str, Any] = {"read_concern": concern}
    probe = scratch.with_options(read_concern=store.read_concern)
    try:
        await probe.find_one({"_id": "doctor"})
    except PyMongoError as exc:
        return Check(
            "read concern",
            "fail",
            f"{level}: the server refuses it ({short_reason(exc)}); pass "
            "MongoStore(read_concern=...)",
            data,
        )
    majority_writes = store.write_concern.document.get("w") == "majority"
    if level == "majority" and not majority_writes:
        return Check(
            "read concern",
            "warn",
            "majority reads with writes that are not majority-acknowledged: the store may "
            "not see its own writes at once",
            data,
        )
    if level != "majority" and majority_writes:
        return Check(
            "read concern",
            "warn",
            f"{level}: a read may see a write that a failover rolls back; the default is majority",
            data,
        )
    return Check("read concern", "ok", f"{level} (accepted by the server)", data)


async def _change_streams(scratch: AsyncCollection[Any], timeout: float) -> Check:
    sent = time.perf_counter()
    try:
        async with asyncio.timeout(timeout):
            stream = await scratch.watch(max_await_time_ms=100)
            try:
                await scratch.insert_one({"_id": "change-stream-probe"})
                sent = time.perf_counter()
                while True:
                    event = await stream.try_next()
                    if event is not None:
                        break
            finally:
                await stream.close()
    except TimeoutError:
        return Check(
            "change streams",
            "warn",
            f"no change event within {timeout:g} s: workers and waiters poll instead",
            {"change_streams": False},
        )
    except PyMongoError as exc:
        return Check(
            "change streams",
            "warn",
            f"not available ({short_reason(exc)}): workers and waiters poll instead",
            {"change_streams": False},
        )
    delay = time.perf_counter() - sent
    return Check(
        "change streams",
        "ok",
        f"an event arrived {delay * 1000:.0f} ms after its write",
        {"change_streams": True, "delay_s": round(delay, 4)},
    )


def _expected(store: MongoStore) -> list[tuple[AsyncCollection[Any], IndexModel]]:
    pairs: list[tuple[AsyncCollection[Any], IndexModel]] = []
    for collection, models in (
        (store.runs, RUN_INDEXES),
        (store.steps, STEP_INDEXES),
        (store.events, EVENT_INDEXES),
    ):
        pairs += [(collection, model) for model in models]
    return pairs


def _shape(document: dict[str, Any]) -> tuple[tuple[tuple[str, Any], ...], bool]:
    """An index compared by what it does (servers name them differently)."""
    key = tuple((str(k), int(v)) for k, v in dict(document["key"]).items())
    return key, bool(document.get("unique", False))


async def _present(collection: AsyncCollection[Any]) -> list[dict[str, Any]]:
    cursor = await collection.list_indexes()
    return [dict(ix) async for ix in cursor]


def _describe(collection: AsyncCollection[Any], model: IndexModel) -> str:
    doc = model.document
    keys = ", ".join(dict(doc["key"]))
    unique = " unique" if doc.get("unique") else ""
    return f"{collection.name}({keys}){unique}"


async def _indexes(store: MongoStore) -> Check:
    expected = _expected(store)
    present: dict[str, set[tuple[tuple[tuple[str, Any], ...], bool]]] = {}
    for collection in (store.runs, store.steps, store.events):
        present[collection.name] = {_shape(ix) for ix in await _present(collection)}
    missing = [
        (collection, model)
        for collection, model in expected
        if _shape(model.document) not in present[collection.name]
    ]
    data: dict[str, Any] = {
        "expected": len(expected),
        "missing": [_describe(c, m) for c, m in missing],
    }
    if not missing:
        return Check("indexes", "ok", f"all {len(expected)} indexes present", data)
    names = ", ".join(data["missing"])
    if len(missing) == len(expected):
        names = f"all {len(expected)} indexes (the store was never initialised here)"
    return Check(
        "indexes",
        "warn",
        f"missing {names}: hot queries scan their collection; fix: pikku-mongo init",
        data,
    )


async def _retention(store: MongoStore) -> Check:
    """Who deletes the runs past their ``retention=``: the server's TTL monitor, or the
    recovery pass's bounded sweep (the test servers run no monitor)."""
    if await ttl_monitor(store.database):
        detail = "the server's TTL monitor deletes ended runs past their retention"
        return Check("retention", "ok", detail, {"ttl_monitor": True})
    detail = (
        "no TTL monitor on this server: the recovery pass deletes ended runs past their "
        "retention, a bounded batch per pass (a fleet must run recovery)"
    )
    return Check("retention", "ok", detail, {"ttl_monitor": False})


async def _ttl_index(store: MongoStore) -> Check:
    want = LEASE_TTL_INDEX.document
    key = tuple((str(k), int(v)) for k, v in dict(want["key"]).items())
    for ix in await _present(store.leases):
        if _shape(ix)[0] == key and "expireAfterSeconds" in ix:
            after = int(ix["expireAfterSeconds"])
            data = {"expire_after_seconds": after}
            if after != want["expireAfterSeconds"]:
                return Check(
                    "TTL index",
                    "warn",
                    f"{store.leases.name}.expires_at expires after {after} s, not "
                    f"{want['expireAfterSeconds']} s: a lease's token may restart too soon "
                    "(drop the index, then run pikku-mongo init)",
                    data,
                )
            return Check(
                "TTL index",
                "ok",
                f"{store.leases.name}.expires_at, documents removed {after} s after expiry",
                data,
            )
    return Check(
        "TTL index",
        "warn",
        f"missing on {store.leases.name}.expires_at: ended leases are never removed (space, "
        "not correctness); fix: pikku-mongo init",
        {"expire_after_seconds": None},
    )


async def _clock(store: MongoStore, kind: str = "") -> Check:
    measured = await store.clock_offset()
    bound = store.max_clock_skew
    if measured is None:
        return Check(
            "clock",
            "warn",
            "the server reports no localTime: this host's clock offset is unknown",
            {"max_clock_skew_s": bound},
        )
    data = {
        "offset_s": round(measured.offset, 6),
        "uncertainty_s": round(measured.uncertainty, 6),
        "rtt_s": round(measured.rtt, 6),
        "max_clock_skew_s": bound,
    }
    # Through a router the offset is the mongos's clock, not any shard's.
    against = "the mongos clock" if kind == "sharded" else "the server"
    text = (
        f"this host is {measured.offset * 1000:+.1f} ms (± {measured.uncertainty * 1000:.1f} "
        f"ms) off {against}; max_clock_skew {bound:g} s"
    )
    if measured.beyond(bound):
        return Check(
            "clock",
            "fail",
            f"{text}: beyond the bound, lease expiry may be misjudged; fix the clock sync",
            data,
        )
    if measured.beyond(bound / 2):
        return Check(
            "clock",
            "warn",
            f"{text}: beyond half the bound (two hosts each half off may be a whole bound apart)",
            data,
        )
    return Check("clock", "ok", text, data)


def _concern_text(concern: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(concern.items()))
