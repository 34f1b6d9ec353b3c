"""The wire-server probes of types and names: datetimes, nested and large values,
document size, nulls, collection names, integer ids."""

from __future__ import annotations

import datetime as dt
import time

from bson import ObjectId
from pymongo import AsyncMongoClient
from pymongo.errors import PyMongoError

from tests.servers_probe.probing import T0, UTC, Check, Ctx, Doc, diff, fmt_exc, ok, probe


@probe("datetime round trip (tz_aware=True)", "aware UTC, ms precision")
async def p_datetime(c: Ctx) -> Check:
    col = c.coll("dt")
    src = dt.datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=dt.timezone(dt.timedelta(hours=3)))
    await col.insert_one({"_id": 1, "d": src, "n": {"d": src}})
    got = await col.find_one({"_id": 1})
    assert got is not None
    want = src.replace(microsecond=123000).astimezone(UTC)
    d = got["d"]
    detail = f"stored {src.isoformat()} -> {d!r} (tzinfo={d.tzinfo})"
    good = (
        d == want
        and d.tzinfo is not None
        and d.utcoffset() == dt.timedelta(0)
        and got["n"]["d"] == want
    )
    # match on exact value
    hit = await col.count_documents({"d": want})
    detail += f"; equality query on stored value hits={hit}"
    return ok(detail) if good and hit == 1 else diff(detail)


@probe("datetime naive client (tz_aware=False)", "naive UTC datetime")
async def p_datetime_naive(c: Ctx) -> Check:
    cl: AsyncMongoClient[Doc] = AsyncMongoClient(c.uri)
    try:
        col = cl[c.db.name][f"dtn_{time.monotonic_ns()}"]
        await col.insert_one({"_id": 1, "d": dt.datetime(2031, 1, 1, 12, 0, tzinfo=UTC)})
        got = await col.find_one({"_id": 1})
    finally:
        await cl.close()
    assert got is not None
    d = got["d"]
    return (
        ok(repr(d)) if d == dt.datetime(2031, 1, 1, 12, 0) and d.tzinfo is None else diff(repr(d))
    )


@probe("nested dicts, lists, None, large ints, types", "exact round trip incl. int64 and types")
async def p_types(c: Ctx) -> Check:
    col = c.coll("types")
    oid = ObjectId()
    doc = {
        "_id": "t",
        "nested": {"a": {"b": {"c": [1, {"d": None}]}}},
        "list": [1, "two", 3.5, None, [4, 5], {"six": 6}],
        "none": None,
        "i32max": 2**31 - 1,
        "i64": 2**62 + 7,
        "i64min": -(2**63),
        "neg": -5,
        "float": 1.25,
        "bool": True,
        "bytes": b"\x00\xff",
        "oid": oid,
        "empty": {},
        "emptyl": [],
        "unicode": "ääkkönen \u2603",
    }
    await col.insert_one(doc)
    got = await col.find_one({"_id": "t"})
    bad = {
        k: (doc[k], (got or {}).get(k, "<missing>"))
        for k in doc
        if (got or {}).get(k, "<missing>") != doc[k]
    }
    typ = {
        k: type(v).__name__
        for k, v in (got or {}).items()
        if k in ("i64", "i32max", "float", "bytes", "oid")
    }
    queries: list[Doc] = [
        {"i64": 2**62 + 7},
        {"none": None},
        {"nested.a.b.c": 1},
        {"list": "two"},
        {"i64": 2**62 + 7, "none": None, "nested.a.b.c": 1},
    ]
    hits = [await col.count_documents(qq) for qq in queries]
    q = min(hits)
    try:
        await col.insert_one({"_id": "big", "v": 2**64})
        big = "2**64 accepted?!"
    except (OverflowError, PyMongoError) as e:
        big = "2**64 -> " + fmt_exc(e)
    detail = (
        f"mismatches={bad}; types={typ}; "
        f"count_documents hits (i64, none:null, nested.a.b.c:1, list:'two', all3)={hits}; {big}"
    )
    return ok(detail) if not bad and q == 1 else diff(detail)


@probe("document > 16 MiB", "DocumentTooLarge (client-side) / BSONObjectTooLarge")
async def p_big(c: Ctx) -> Check:
    col = c.coll("big")
    out = []
    mib = 1024 * 1024
    # pymongo itself rejects docs > maxBsonObjectSize + 16382 bytes of command
    # overhead (DocumentTooLarge); a doc between 16 MiB and that must be
    # refused by the server (MongoDB: BSONObjectTooLarge, code 10334).
    for label, size in (("16MiB+1KiB", 16 * mib + 1024), ("17MiB", 17 * mib)):
        try:
            await col.insert_one({"_id": label, "s": "x" * size})
            out.append(f"{label} insert ACCEPTED by server")
        except Exception as e:
            out.append(f"{label} insert: " + fmt_exc(e))
    try:
        await col.insert_one({"_id": 2, "s": "x" * (15 * 1024 * 1024)})
        got = await col.find_one({"_id": 2})
        out.append(f"15MiB ok (len {len((got or {}).get('s', ''))})")
        try:
            await col.update_one({"_id": 2}, {"$set": {"t": "y" * (2 * 1024 * 1024)}})
            got = await col.find_one({"_id": 2}, {"t": 1})
            out.append(
                f"update growing it past 16MiB ACCEPTED (t len {len((got or {}).get('t', ''))})"
            )
        except Exception as e:
            out.append("update to >16MiB: " + fmt_exc(e))
    except Exception as e:
        out.append("15MiB: " + fmt_exc(e))
    return Check("info", "; ".join(out))


@probe(
    "null/missing semantics: find vs fouu vs update_one",
    "k:null & $ne:null & $exists:false per MongoDB",
)
async def p_null(c: Ctx) -> Check:
    col = c.coll("null")
    await col.insert_many([{"_id": "t", "k": 5}, {"_id": "u", "k": None}, {"_id": "v"}])
    want = {
        "k:null": ["u", "v"],
        "k:$ne null": ["t"],
        "k:$exists false": ["v"],
        "k:$ne 7": ["t", "u", "v"],
    }
    flts: dict[str, Doc] = {
        "k:null": {"k": None},
        "k:$ne null": {"k": {"$ne": None}},
        "k:$exists false": {"k": {"$exists": False}},
        "k:$ne 7": {"k": {"$ne": 7}},
    }
    got_find = {n: sorted([d["_id"] async for d in col.find(f)]) for n, f in flts.items()}
    counts = {n: await col.count_documents(f) for n, f in flts.items()}
    # write paths: per doc, does {_id: X, <cond>} match?
    got_fouu: dict[str, list[str]] = {}
    got_upd: dict[str, list[str]] = {}
    for n, f in flts.items():
        got_fouu[n] = []
        got_upd[n] = []
        for x in ("t", "u", "v"):
            if await col.find_one_and_update({"_id": x, **f}, {"$set": {"seen": 1}}) is not None:
                got_fouu[n].append(x)
            if (await col.update_one({"_id": x, **f}, {"$set": {"seen": 2}})).matched_count:
                got_upd[n].append(x)
    bad = [
        f"{path} {n}: {got[n]} (want {want[n]})"
        for path, got in (("find", got_find), ("fouu", got_fouu), ("update_one", got_upd))
        for n in want
        if got[n] != want[n]
    ]
    bad += [
        f"count_documents {n}: {counts[n]} (want {len(want[n])})"
        for n in want
        if counts[n] != len(want[n])
    ]
    return ok("all as MongoDB") if not bad else diff("; ".join(bad))


@probe("collection names with '.' and '-'", "allowed (e.g. 'runs.steps', 'a-b')")
async def p_coll_names(c: Ctx) -> Check:
    out = []
    bad = False
    for name in ("runs.steps", "a-b", "x_1"):
        try:
            await c.db[name].insert_one({"_id": 1})
            out.append(f"{name!r} ok")
        except PyMongoError as e:
            bad = True
            out.append(f"{name!r}: {fmt_exc(e)}")
    return diff("; ".join(out)) if bad else ok("; ".join(out))


@probe("integer _id: sort / range / aggregate", "numeric order; ints stay ints")
async def p_int_id(c: Ctx) -> Check:
    col = c.coll("intid")
    await col.insert_many([{"_id": i, "d": T0, "v": i} for i in (1, 2, 9, 10, 11)])
    srt = [d["_id"] async for d in col.find({}).sort("_id", 1)]
    rng = [d["_id"] async for d in col.find({"_id": {"$gt": 9}})]
    rng_dt = [d["_id"] async for d in col.find({"d": T0, "_id": {"$gt": 9}})]
    rng_v = [d["_id"] async for d in col.find({"v": {"$gte": 1}, "_id": {"$gt": 9}})]
    agg = [
        d["_id"]
        async for d in await col.aggregate(
            [{"$match": {"_id": {"$gte": 9}}}, {"$sort": {"_id": 1}}]
        )
    ]
    detail = (
        f"sort _id={srt}; _id>9={rng}; d==T & _id>9={rng_dt}; v>=1 & _id>9={rng_v}; "
        f"aggregate $match _id>=9 $sort _id={agg!r}"
    )
    good = srt == [1, 2, 9, 10, 11] and rng == rng_dt == rng_v == [10, 11] and agg == [9, 10, 11]
    return ok(detail) if good else diff(detail)
