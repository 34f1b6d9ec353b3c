"""Feature probe for the MongoDB-wire test servers (nx-27017, mongoeco).

Runs a fixed list of checks with pymongo's async API (``AsyncMongoClient``)
and prints a matrix: for each check, what MongoDB itself does ("expect") and
what each server did. Exceptions are recorded verbatim (type, code, message).

    .venv/bin/python tests/servers_probe/probe.py                # both servers
    .venv/bin/python tests/servers_probe/probe.py --servers nx
    .venv/bin/python tests/servers_probe/probe.py --uri mongodb://... --name x
    ... --json out.json  (machine-readable results)

Not a pytest module (no test_ functions); it is a diagnostic tool.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import multiprocessing as mp
import random
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bson import ObjectId
from pymongo import (
    ASCENDING,
    AsyncMongoClient,
    DeleteOne,
    InsertOne,
    ReturnDocument,
    UpdateOne,
    monitoring,
)
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError, PyMongoError

REPO = Path(__file__).resolve().parents[2]

from tests.support import servers as test_servers  # noqa: E402

Doc = dict[str, Any]
UTC = dt.UTC
T0 = dt.datetime(2030, 1, 1, tzinfo=UTC)


def t(minutes: int) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def fmt_exc(exc: BaseException) -> str:
    code = getattr(exc, "code", None)
    msg = str(exc).replace("\n", " ")
    if len(msg) > 300:
        msg = msg[:300] + "..."
    return f"{type(exc).__name__}" + (f"(code={code})" if code is not None else "") + f": {msg}"


class Check:
    """Outcome of one probe: ok / DIFF (runs but differs from MongoDB) / ERROR."""

    def __init__(self, status: str, detail: str) -> None:
        self.status = status
        self.detail = detail

    def as_dict(self) -> dict[str, str]:
        return {"status": self.status, "detail": self.detail}


def ok(detail: str = "") -> Check:
    return Check("ok", detail)


def diff(detail: str) -> Check:
    return Check("DIFF", detail)


class CommandCounter(monitoring.CommandListener):
    def __init__(self) -> None:
        self.names: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


class Ctx:
    def __init__(
        self,
        client: AsyncMongoClient[Doc],
        db: AsyncDatabase[Doc],
        counter: CommandCounter,
        uri: str,
    ):
        self.client = client
        self.db = db
        self.counter = counter
        self.uri = uri
        self._n = 0

    def coll(self, name: str) -> Any:
        self._n += 1
        return self.db[f"{name}_{self._n}"]


ProbeFn = Callable[[Ctx], Awaitable[Check]]
PROBES: list[tuple[str, str, ProbeFn]] = []


def probe(name: str, expect: str) -> Callable[[ProbeFn], ProbeFn]:
    def deco(fn: ProbeFn) -> ProbeFn:
        PROBES.append((name, expect, fn))
        return fn

    return deco


# ---------------------------------------------------------------- basics


@probe("insert_one", "inserted, readable")
async def p_insert(c: Ctx) -> Check:
    col = c.coll("ins")
    r = await col.insert_one({"_id": "a", "v": 1})
    got = await col.find_one({"_id": "a"})
    return (
        ok(f"inserted_id={r.inserted_id!r}")
        if got == {"_id": "a", "v": 1}
        else diff(f"read back {got!r}")
    )


@probe("insert duplicate _id", "DuplicateKeyError code 11000")
async def p_dup_id(c: Ctx) -> Check:
    col = c.coll("dup")
    await col.insert_one({"_id": 1})
    try:
        await col.insert_one({"_id": 1})
    except DuplicateKeyError as e:
        return ok(fmt_exc(e))
    except PyMongoError as e:
        return diff("other error: " + fmt_exc(e))
    return diff(f"no error; count={await col.count_documents({})}")


@probe("unique compound index (run_id,name)", "2nd (r1,a) -> DuplicateKeyError; (r2,a) ok")
async def p_unique_compound(c: Ctx) -> Check:
    col = c.coll("uniq")
    name = await col.create_index([("run_id", ASCENDING), ("name", ASCENDING)], unique=True)
    await col.insert_one({"run_id": "r1", "name": "a"})
    await col.insert_one({"run_id": "r2", "name": "a"})
    await col.insert_one({"run_id": "r1", "name": "b"})
    try:
        await col.insert_one({"run_id": "r1", "name": "a"})
    except DuplicateKeyError as e:
        return ok(f"index={name}; {fmt_exc(e)}")
    return diff(f"duplicate accepted; count={await col.count_documents({})}")


@probe("unique compound index via upsert/update", "update that creates a dup -> DuplicateKeyError")
async def p_unique_update(c: Ctx) -> Check:
    col = c.coll("uniqu")
    await col.create_index([("run_id", ASCENDING), ("name", ASCENDING)], unique=True)
    await col.insert_one({"_id": 1, "run_id": "r1", "name": "a"})
    await col.insert_one({"_id": 2, "run_id": "r1", "name": "b"})
    try:
        await col.update_one({"_id": 2}, {"$set": {"name": "a"}})
    except DuplicateKeyError as e:
        return ok(fmt_exc(e))
    return diff(f"update made a duplicate: {await col.find({}).to_list()}")


@probe("create_index twice", "idempotent, same name, no error")
async def p_index_idem(c: Ctx) -> Check:
    col = c.coll("idx")
    n1 = await col.create_index([("status", 1), ("due_at", 1)])
    n2 = await col.create_index([("status", 1), ("due_at", 1)])
    u1 = await col.create_index([("k", 1)], unique=True)
    u2 = await col.create_index([("k", 1)], unique=True)
    info = await col.index_information()
    listed = [ix["name"] async for ix in await col.list_indexes()]
    detail = (
        f"returned names={n1},{n2},{u1},{u2}; "
        f"index_information keys={sorted(info)}; list_indexes={listed}"
    )
    try:
        await col.drop_index(n1)
        detail += f"; drop_index({n1!r}) ok"
        dropped = True
    except PyMongoError as e:
        detail += f"; drop_index({n1!r}) -> {fmt_exc(e)}"
        dropped = False
    good = n1 == n2 and u1 == u2 and n1 in info and u1 in info and dropped
    return ok(detail) if good else diff(detail)


@probe("TTL index (expireAfterSeconds)", "accepted; docs removed by TTL monitor (~60 s on MongoDB)")
async def p_ttl(c: Ctx) -> Check:
    col = c.coll("ttl")
    try:
        name = await col.create_index("expire_at", expireAfterSeconds=0)
    except PyMongoError as e:
        return diff("refused: " + fmt_exc(e))
    info = await col.index_information()
    now = dt.datetime.now(UTC)
    await col.insert_one({"_id": "past", "expire_at": now - dt.timedelta(hours=1)})
    await col.insert_one({"_id": "future", "expire_at": now + dt.timedelta(hours=1)})
    left0 = sorted([d["_id"] async for d in col.find({})])
    await asyncio.sleep(2)
    left2 = sorted([d["_id"] async for d in col.find({})])
    return ok(
        f"accepted name={name}; index_information={info}; "
        f"docs right after insert={left0}, after 2s={left2}"
    )


# ------------------------------------------------ find_one_and_update


async def seeded(c: Ctx, name: str) -> Any:
    col = c.coll(name)
    await col.insert_many(
        [
            {"_id": 1, "status": "ready", "due_at": t(10), "kind": "x"},
            {"_id": 2, "status": "ready", "due_at": t(5), "kind": "y"},
            {"_id": 3, "status": "running", "due_at": t(1), "kind": "x", "lease": t(0)},
            {"_id": 4, "status": "ready", "due_at": t(5), "kind": "z"},
            {"_id": 5, "status": "done", "due_at": t(0)},
        ]
    )
    return col


async def fouu_id(col: Any, flt: Doc, **kw: Any) -> Any:
    kw.setdefault("sort", [("due_at", 1), ("_id", 1)])
    doc = await col.find_one_and_update(flt, {"$set": {"touched": True}}, **kw)
    return None if doc is None else doc["_id"]


def expect_id(got: Any, want: Any, what: str) -> Check:
    return (
        ok(f"{what} -> _id {got!r}")
        if got == want
        else diff(f"{what} -> _id {got!r}, MongoDB gives {want!r}")
    )


@probe("fouu filter $or", "matches either branch")
async def p_or(c: Ctx) -> Check:
    col = await seeded(c, "or")
    flt = {
        "$or": [
            {"status": "ready", "due_at": {"$lte": t(5)}},
            {"status": "running", "lease": {"$lt": t(1)}},
        ]
    }
    return expect_id(
        await fouu_id(col, flt), 3, "$or(ready&due<=t5 | running&lease<t1) sort due,_id"
    )


@probe("fouu $lt/$lte on datetimes", "$lt excludes equal, $lte includes")
async def p_lt_lte(c: Ctx) -> Check:
    col = await seeded(c, "lt")
    a = await fouu_id(col, {"status": "ready", "due_at": {"$lt": t(5)}})
    b = await fouu_id(col, {"status": "ready", "due_at": {"$lte": t(5)}})
    if a is None and b == 2:
        return ok("$lt t5 -> None, $lte t5 -> 2")
    return diff(f"$lt t5 -> {a!r} (want None), $lte t5 -> {b!r} (want 2)")


@probe("fouu $in", "matches listed values")
async def p_in(c: Ctx) -> Check:
    col = await seeded(c, "in")
    return expect_id(
        await fouu_id(col, {"kind": {"$in": ["z", "x"]}, "status": "ready"}),
        4,
        "kind $in [z,x] & ready",
    )


@probe("fouu $ne (incl. missing field)", "$ne matches docs lacking the field")
async def p_ne(c: Ctx) -> Check:
    col = await seeded(c, "ne")
    a = await fouu_id(col, {"status": {"$ne": "done"}})
    b = await fouu_id(col, {"_id": 5, "kind": {"$ne": "x"}})  # _id 5 has no kind
    if a == 3 and b == 5:
        return ok("status $ne done -> 3; missing kind $ne x -> 5")
    return diff(f"status $ne done -> {a!r} (want 3); missing kind $ne x -> {b!r} (want 5)")


@probe("fouu $exists", "true/false both work")
async def p_exists(c: Ctx) -> Check:
    col = await seeded(c, "ex")
    a = await fouu_id(col, {"lease": {"$exists": True}})
    b = await fouu_id(col, {"lease": {"$exists": False}, "status": "ready"})
    if a == 3 and b == 2:
        return ok("lease exists -> 3; not exists & ready -> 2")
    return diff(f"exists -> {a!r} (want 3); not exists & ready -> {b!r} (want 2)")


@probe("fouu sort [(due_at,1),(_id,1)]", "earliest due_at, tie by _id")
async def p_sort(c: Ctx) -> Check:
    col = await seeded(c, "sort")
    a = await fouu_id(col, {"status": "ready"})
    b = await fouu_id(col, {"status": "ready"}, sort=[("due_at", 1), ("_id", -1)])
    d = await fouu_id(col, {"status": "ready"}, sort=[("due_at", -1)])
    if (a, b, d) == (2, 4, 1):
        return ok("(due,_id asc)->2, (due asc,_id desc)->4, (due desc)->1")
    return diff(f"got {a!r},{b!r},{d!r}; want 2,4,1")


@probe("fouu return_document BEFORE/AFTER", "BEFORE = pre-image, AFTER = post-image")
async def p_return_doc(c: Ctx) -> Check:
    col = c.coll("rd")
    await col.insert_one({"_id": 1, "n": 0})
    before = await col.find_one_and_update(
        {"_id": 1}, {"$inc": {"n": 1}}, return_document=ReturnDocument.BEFORE
    )
    after = await col.find_one_and_update(
        {"_id": 1}, {"$inc": {"n": 1}}, return_document=ReturnDocument.AFTER
    )
    proj = await col.find_one_and_update(
        {"_id": 1},
        {"$inc": {"n": 1}},
        projection={"n": 1, "_id": 0},
        return_document=ReturnDocument.AFTER,
    )
    got = (before, after, proj)
    want = ({"_id": 1, "n": 0}, {"_id": 1, "n": 2}, {"n": 3})
    return ok(f"{got}") if got == want else diff(f"got {got}, want {want}")


@probe("fouu upsert=True, no match", "inserts doc with filter equality fields + update")
async def p_upsert_new(c: Ctx) -> Check:
    col = c.coll("ups")
    doc = await col.find_one_and_update(
        {"_id": "k", "status": "free", "due_at": {"$lte": t(0)}},
        {"$set": {"owner": "w1"}},
        upsert=True,
        return_document=ReturnDocument.AFTER,
    )
    want = {"_id": "k", "status": "free", "owner": "w1"}
    return ok(f"{doc}") if doc == want else diff(f"got {doc}, want {want}")


@probe(
    "fouu upsert=True, _id exists but non-eq cond fails",
    "DuplicateKeyError (E11000) - insert of existing _id",
)
async def p_upsert_dup(c: Ctx) -> Check:
    col = c.coll("upsd")
    await col.insert_one({"_id": "k", "status": "taken", "attempts": 5})
    try:
        doc = await col.find_one_and_update(
            {"_id": "k", "attempts": {"$lt": 3}},
            {"$set": {"status": "free"}},
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )
    except DuplicateKeyError as e:
        return ok(fmt_exc(e))
    except PyMongoError as e:
        return diff("other error: " + fmt_exc(e))
    return diff(f"no error; returned {doc}; stored {await col.find({}).to_list()}")


@probe("fouu $set+$inc+$unset+$push together", "all four applied")
async def p_multi_ops(c: Ctx) -> Check:
    col = c.coll("mops")
    await col.insert_one({"_id": 1, "a": 1, "n": 1, "gone": "x", "log": ["e0"]})
    doc = await col.find_one_and_update(
        {"_id": 1},
        {
            "$set": {"a": 2, "b": {"c": 1}},
            "$inc": {"n": 2},
            "$unset": {"gone": ""},
            "$push": {"log": "e1"},
        },
        return_document=ReturnDocument.AFTER,
    )
    want = {"_id": 1, "a": 2, "n": 3, "log": ["e0", "e1"], "b": {"c": 1}}
    return ok(f"{doc}") if doc == want else diff(f"got {doc}, want {want}")


@probe("fouu $set 'inflight.abc' + $unset 'inflight.xyz'", "nested key added, sibling removed")
async def p_dotted(c: Ctx) -> Check:
    col = c.coll("dot")
    await col.insert_one({"_id": 1, "inflight": {"xyz": {"t": 1}, "keep": 1}})
    doc = await col.find_one_and_update(
        {"_id": 1},
        {"$set": {"inflight.abc": {"t": 2}}, "$unset": {"inflight.xyz": ""}},
        return_document=ReturnDocument.AFTER,
    )
    want = {"_id": 1, "inflight": {"keep": 1, "abc": {"t": 2}}}
    d2 = await col.find_one_and_update(
        {"_id": 1, "inflight.abc": {"$exists": True}},
        {"$inc": {"inflight.abc.t": 1}},
        return_document=ReturnDocument.AFTER,
    )
    extra = f"; then filter inflight.abc $exists + $inc inflight.abc.t -> {d2}"
    return ok(f"{doc}{extra}") if doc == want else diff(f"got {doc}, want {want}{extra}")


@probe("fouu upsert $setOnInsert + $set", "insert: both applied; existing doc: only $set")
async def p_set_on_insert(c: Ctx) -> Check:
    col = c.coll("soi")
    ins = await col.find_one_and_update(
        {"_id": 1},
        {"$setOnInsert": {"created": 1}, "$set": {"v": 1}},
        upsert=True,
        return_document=ReturnDocument.AFTER,
    )
    upd = await col.find_one_and_update(
        {"_id": 1},
        {"$setOnInsert": {"created": 2}, "$set": {"v": 2}},
        upsert=True,
        return_document=ReturnDocument.AFTER,
    )
    ins2 = await col.update_one(
        {"_id": 2}, {"$setOnInsert": {"created": 1}, "$set": {"v": 1}}, upsert=True
    )
    stored2 = await col.find_one({"_id": 2})
    got = (ins, upd, stored2)
    want = (
        {"_id": 1, "created": 1, "v": 1},
        {"_id": 1, "created": 1, "v": 2},
        {"_id": 2, "created": 1, "v": 1},
    )
    detail = (
        f"fouu insert={ins}; fouu existing={upd}; "
        f"update_one upsert stored={stored2} (upserted_id={ins2.upserted_id!r})"
    )
    return ok(detail) if got == want else diff(detail)


@probe(
    "update_one upsert {_id:X, attempts:{$lt:3}}, X exists attempts=5", "DuplicateKeyError (E11000)"
)
async def p_update_one_upsert_dup(c: Ctx) -> Check:
    col = c.coll("uoud")
    await col.insert_one({"_id": "X", "attempts": 5})
    try:
        r = await col.update_one(
            {"_id": "X", "attempts": {"$lt": 3}}, {"$inc": {"attempts": 1}}, upsert=True
        )
    except DuplicateKeyError as e:
        return ok(fmt_exc(e))
    except PyMongoError as e:
        return diff("other error: " + fmt_exc(e))
    return diff(
        f"no error; matched={r.matched_count} modified={r.modified_count} "
        f"upserted_id={r.upserted_id!r}; "
        f"stored={await col.find({}).to_list()}"
    )


# -------------------------------------------------------- multi-doc writes


@probe("update_many", "matched/modified counts, all updated")
async def p_update_many(c: Ctx) -> Check:
    col = await seeded(c, "um")
    r = await col.update_many({"status": "ready"}, {"$set": {"status": "paused"}})
    n = await col.count_documents({"status": "paused"})
    detail = f"matched={r.matched_count} modified={r.modified_count} now_paused={n}"
    return (
        ok(detail)
        if (r.matched_count, r.modified_count, n) == (3, 3, 3)
        else diff(detail + " (want 3,3,3)")
    )


@probe("delete_many", "deleted_count")
async def p_delete_many(c: Ctx) -> Check:
    col = await seeded(c, "dm")
    r = await col.delete_many({"due_at": {"$lte": t(5)}})
    left = await col.count_documents({})
    detail = f"deleted={r.deleted_count} left={left}"
    return ok(detail) if (r.deleted_count, left) == (4, 1) else diff(detail + " (want 4,1)")


@probe("bulk_write 5x UpdateOne (+upsert)", "one 'update' command; counts right")
async def p_bulk(c: Ctx) -> Check:
    col = await seeded(c, "bw")
    ops = [UpdateOne({"_id": i}, {"$set": {"b": i}}) for i in (1, 2, 3, 4)]
    ops.append(UpdateOne({"_id": 99}, {"$set": {"b": 99}}, upsert=True))
    c.counter.names.clear()
    r = await col.bulk_write(ops, ordered=True)
    cmds = [n for n in c.counter.names if n not in ("endSessions",)]
    n = await col.count_documents({"b": {"$exists": True}})
    detail = (
        f"commands sent={cmds}; matched={r.matched_count} modified={r.modified_count} "
        f"upserted={r.upserted_count} docs_with_b={n}"
    )
    good = cmds == ["update"] and (r.matched_count, r.modified_count, r.upserted_count, n) == (
        4,
        4,
        1,
        5,
    )
    return ok(detail) if good else diff(detail + " (want ['update'], 4,4,1,5)")


@probe("bulk_write mixed Insert/Update/Delete", "3 commands (insert, update, delete)")
async def p_bulk_mixed(c: Ctx) -> Check:
    col = await seeded(c, "bwm")
    c.counter.names.clear()
    r = await col.bulk_write(
        [InsertOne({"_id": 50}), UpdateOne({"_id": 1}, {"$inc": {"n": 1}}), DeleteOne({"_id": 2})],
        ordered=False,
    )
    detail = (
        f"commands={c.counter.names}; "
        f"ins={r.inserted_count} mod={r.modified_count} del={r.deleted_count}"
    )
    return (
        ok(detail)
        if (r.inserted_count, r.modified_count, r.deleted_count) == (1, 1, 1)
        else diff(detail)
    )


@probe("count_documents", "counts with filter / empty filter")
async def p_count(c: Ctx) -> Check:
    col = await seeded(c, "cnt")
    a = await col.count_documents({})
    b = await col.count_documents({"status": "ready", "due_at": {"$gte": t(5)}})
    e = await col.estimated_document_count()
    detail = f"all={a} ready&due>=t5={b} estimated={e}"
    return ok(detail) if (a, b, e) == (5, 3, 5) else diff(detail + " (want 5,3,5)")


# ------------------------------------------------------------------ reads


async def paged(c: Ctx, name: str) -> Any:
    col = c.coll(name)
    docs = [{"_id": f"j{i:02d}", "n": i, "due_at": t(i // 3), "g": i % 2} for i in range(12)]
    await col.insert_many(list(reversed(docs)))
    return col


@probe("find sort compound + limit", "order by (due_at, _id desc), limit 4")
async def p_find_sort(c: Ctx) -> Check:
    col = await paged(c, "fs")
    ids = [d["n"] async for d in col.find({}).sort([("due_at", 1), ("_id", -1)]).limit(4)]
    skip = [
        d["n"]
        async for d in col.find({}, {"n": 1}).sort([("due_at", -1), ("_id", 1)]).skip(2).limit(3)
    ]
    detail = f"(string _id) asc/desc limit4 -> n={ids}; desc/asc skip2 limit3 -> n={skip}"
    return (
        ok(detail)
        if ids == [2, 1, 0, 5] and skip == [11, 6, 7]
        else diff(detail + " (want [2,1,0,5]; [11,6,7])")
    )


async def keyset(col: Any) -> list[Any]:
    seen: list[Any] = []
    last: Doc | None = None
    for _ in range(10):
        flt: Doc = {}
        if last is not None:
            d, i = last["due_at"], last["_id"]
            flt = {"$or": [{"due_at": {"$gt": d}}, {"due_at": d, "_id": {"$gt": i}}]}
        page = await col.find(flt).sort([("due_at", 1), ("_id", 1)]).limit(5).to_list()
        if not page:
            break
        seen += [p["_id"] for p in page]
        last = page[-1]
    return seen


@probe("keyset pagination $or on (due_at,_id)", "pages of 5 cover all 12 in order, no dups")
async def p_keyset(c: Ctx) -> Check:
    col = await paged(c, "ks")
    s_ids = await keyset(col)
    col2 = c.coll("ksi")
    await col2.insert_many([{"_id": i, "due_at": t(i // 3)} for i in range(11, -1, -1)])
    i_ids = await keyset(col2)
    want_s = [f"j{i:02d}" for i in range(12)]
    detail = f"string _id: {s_ids}; int _id: {i_ids}"
    return (
        ok(detail)
        if s_ids == want_s and i_ids == list(range(12))
        else diff(detail + " (want all 12 in order)")
    )


@probe("aggregate $match $sort $limit $project", "pipeline result")
async def p_agg1(c: Ctx) -> Check:
    col = await paged(c, "ag1")
    res = await (
        await col.aggregate(
            [
                {"$match": {"g": 1}},
                {"$sort": {"due_at": -1, "_id": -1}},
                {"$limit": 3},
                {"$project": {"_id": 0, "id": "$_id", "g": 1}},
            ]
        )
    ).to_list()
    want = [{"g": 1, "id": "j11"}, {"g": 1, "id": "j09"}, {"g": 1, "id": "j07"}]
    return ok(f"{res}") if res == want else diff(f"{res} (want {want})")


@probe("aggregate $group / $count", "grouped sums; $count")
async def p_agg2(c: Ctx) -> Check:
    col = await paged(c, "ag2")
    g = await (
        await col.aggregate(
            [
                {"$group": {"_id": "$g", "n": {"$sum": 1}, "mx": {"$max": "$n"}}},
                {"$sort": {"_id": 1}},
            ]
        )
    ).to_list()
    n = await (await col.aggregate([{"$match": {"n": {"$gte": 4}}}, {"$count": "n"}])).to_list()
    want_g = [{"_id": 0, "n": 6, "mx": 10}, {"_id": 1, "n": 6, "mx": 11}]
    detail = f"group={g}; count={n}"
    return ok(detail) if g == want_g and n == [{"n": 8}] else diff(detail)


@probe("aggregate $unwind", "one doc per array element")
async def p_unwind(c: Ctx) -> Check:
    col = c.coll("unw")
    await col.insert_many(
        [{"_id": "u1", "tags": ["a", "b"]}, {"_id": "u2", "tags": []}, {"_id": "u3", "tags": ["c"]}]
    )
    res = await (
        await col.aggregate(
            [{"$unwind": "$tags"}, {"$sort": {"tags": 1}}, {"$project": {"tags": 1}}]
        )
    ).to_list()
    want = [{"_id": "u1", "tags": "a"}, {"_id": "u1", "tags": "b"}, {"_id": "u3", "tags": "c"}]
    return ok(f"{res}") if res == want else diff(f"{res} (want {want})")


# ------------------------------------------------------------------ types


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


# ---------------------------------------------------------- other features


@probe("change streams collection.watch()", "supported on replica sets only")
async def p_watch(c: Ctx) -> Check:
    col = c.coll("cs")
    await col.insert_one({"_id": 0})
    try:
        stream = await col.watch()
    except PyMongoError as e:
        return Check("unsupported", "watch(): " + fmt_exc(e))
    try:
        await col.insert_one({"_id": 1})
        ev = None
        deadline = time.monotonic() + 5
        while ev is None and time.monotonic() < deadline:
            ev = await stream.try_next()
        if ev is None:
            return diff("watch() opened but no event within 5s")
        return ok(f"event: op={ev.get('operationType')} key={ev.get('documentKey')}")
    except PyMongoError as e:
        return diff("after open: " + fmt_exc(e))
    finally:
        await stream.close()


@probe("transactions (session.start_transaction)", "replica set only")
async def p_txn(c: Ctx) -> Check:
    col = c.coll("txn")
    await col.insert_one({"_id": 0})
    try:
        async with c.client.start_session() as s:
            async with await s.start_transaction():
                await col.insert_one({"_id": 1}, session=s)
                await col.update_one({"_id": 0}, {"$set": {"x": 1}}, session=s)
                raise RuntimeError("abort me")
    except RuntimeError:
        pass
    except PyMongoError as e:
        return Check("unsupported", fmt_exc(e))
    left = sorted([d["_id"] async for d in col.find({})])
    x = (await col.find_one({"_id": 0}) or {}).get("x")
    return (
        ok(f"abort rolled back: ids={left} x={x}")
        if left == [0] and x is None
        else diff(f"after abort ids={left} x={x} (rollback did not happen)")
    )


# ------------------------------------------------------------- throughput


async def fouu_rate(c: Ctx, seconds: float = 4.0, max_ops: int = 20000) -> str:
    col = c.coll("rate")
    await col.insert_many(
        [{"_id": i, "n": 0, "status": "free", "due_at": t(i)} for i in range(200)]
    )
    await col.create_index([("status", 1), ("due_at", 1)])
    n = 0
    start = time.perf_counter()
    while n < max_ops and time.perf_counter() - start < seconds:
        await col.find_one_and_update(
            {"_id": n % 200, "status": "free"},
            {"$inc": {"n": 1}, "$set": {"at": t(n)}},
            return_document=ReturnDocument.AFTER,
        )
        n += 1
    el = time.perf_counter() - start
    # queue-style: non-_id filter + sort, the engine's claim shape
    m = 0
    start2 = time.perf_counter()
    while m < max_ops and time.perf_counter() - start2 < seconds:
        await col.find_one_and_update(
            {"status": "free", "due_at": {"$lte": t(10_000)}},
            {"$set": {"due_at": t(1000 + m)}},
            sort=[("due_at", 1), ("_id", 1)],
        )
        m += 1
    el2 = time.perf_counter() - start2
    return (
        f"by _id: {n / el:.0f} ops/s ({n} ops); "
        f"status+due_at $lte + sort over 200 docs: {m / el2:.0f} ops/s ({m} ops)"
    )


def _race_worker(uri: str, db: str, coll: str, me: str, mode: str, barrier: Any, out: Any) -> None:
    async def run() -> None:
        client: AsyncMongoClient[Doc] = AsyncMongoClient(uri)
        col = client[db][coll]
        await client.admin.command("ping")
        barrier.wait()
        got: list[int] = []
        errors: list[str] = []
        ops = 0
        start = time.perf_counter()
        if mode == "by_id":
            order = list(range(500))
            random.Random(me).shuffle(order)  # different order per worker
            for i in order:
                ops += 1
                try:
                    doc = await col.find_one_and_update(
                        {"_id": i, "status": "free"}, {"$set": {"status": "taken", "owner": me}}
                    )
                except PyMongoError as e:
                    errors.append(fmt_exc(e))
                    continue
                if doc is not None:
                    got.append(doc["_id"])
        else:  # queue: claim next free by sort until none left
            while ops < 2000:
                ops += 1
                try:
                    doc = await col.find_one_and_update(
                        {"status": "free"},
                        {"$set": {"status": "taken", "owner": me}},
                        sort=[("_id", 1)],
                    )
                except PyMongoError as e:
                    errors.append(fmt_exc(e))
                    continue
                if doc is None:
                    break
                got.append(doc["_id"])
        el = time.perf_counter() - start
        await client.close()
        out.put(
            {
                "me": me,
                "got": got,
                "ops": ops,
                "secs": el,
                "errors": errors[:5],
                "n_errors": len(errors),
            }
        )

    asyncio.run(run())


async def race(c: Ctx, mode: str) -> Check:
    col = c.coll(f"race_{mode}")
    await col.insert_many([{"_id": i, "status": "free"} for i in range(500)])
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    q = ctx.Queue()
    procs = [
        ctx.Process(
            target=_race_worker, args=(c.uri, c.db.name, col.name, f"w{k}", mode, barrier, q)
        )
        for k in range(2)
    ]
    for p in procs:
        p.start()
    res = sorted((q.get(timeout=300) for _ in procs), key=lambda r: r["me"])
    for p in procs:
        p.join(timeout=30)
    a, b = set(res[0]["got"]), set(res[1]["got"])
    double = len(a & b)
    owners: dict[str, int] = {}
    async for d in col.find({}):
        owners[d.get("owner", "-")] = owners.get(d.get("owner", "-"), 0) + 1
    mismatched = 0
    async for d in col.find({}):
        o = d.get("owner")
        mine = a if o == "w0" else b if o == "w1" else set()
        if d["_id"] not in mine:
            mismatched += 1
    total_ops = res[0]["ops"] + res[1]["ops"]
    wall = max(r["secs"] for r in res)
    detail = (
        f"claims w0={len(a)} w1={len(b)} sum={len(a) + len(b)}/500; double-claims={double}; "
        f"stored owners={owners}; owner!=claimer={mismatched}; ops={total_ops} in {wall:.2f}s "
        f"= {total_ops / wall:.0f} ops/s, {(len(a) + len(b)) / wall:.0f} claims/s; "
        f"errors={res[0]['n_errors'] + res[1]['n_errors']} {res[0]['errors'] + res[1]['errors']}"
    )
    good = double == 0 and len(a) + len(b) == 500 and mismatched == 0
    return ok(detail) if good else diff(detail)


@probe(
    "race: 2 procs x 500 fouu {_id:i,status:free}->taken (shuffled order)",
    "0 double claims, 500 total",
)
async def p_race_id(c: Ctx) -> Check:
    return await race(c, "by_id")


@probe("race: 2 procs fouu {status:free} sort _id (queue pop)", "0 double claims, 500 total")
async def p_race_queue(c: Ctx) -> Check:
    return await race(c, "queue")


@probe("sequential find_one_and_update rate (1 client)", "-")
async def p_rate(c: Ctx) -> Check:
    return Check("info", await fouu_rate(c))


# ------------------------------------------------------------------ driver


async def run_probes(
    name: str, uri: str, only: set[str] | None = None
) -> dict[str, dict[str, str]]:
    counter = CommandCounter()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(uri, tz_aware=True, event_listeners=[counter])
    hello = await client.admin.command("hello")
    db = client[f"probe_{int(time.time())}"]
    ctx = Ctx(client, db, counter, uri)
    results: dict[str, dict[str, str]] = {
        "_server": {
            "status": "info",
            "detail": (
                f"{name} {uri} maxWireVersion={hello.get('maxWireVersion')} "
                f"setName={hello.get('setName')}"
            ),
        }
    }
    for pname, _expect, fn in PROBES:
        if only and not any(o in pname for o in only):
            continue
        t0 = time.perf_counter()
        try:
            res = await asyncio.wait_for(fn(ctx), timeout=240)
        except Exception as e:
            res = Check("ERROR", fmt_exc(e))
        results[pname] = res.as_dict()
        print(
            f"[{name}] {res.status:5} {pname} ({time.perf_counter() - t0:.1f}s): {res.detail}",
            flush=True,
        )
    await client.close()
    return results


def render(all_results: dict[str, dict[str, dict[str, str]]]) -> str:
    names = list(all_results)
    lines = ["| check | MongoDB | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    expect = {p: e for p, e, _ in PROBES}
    for pname in ["_server"] + [p for p, _, _ in PROBES]:
        row = [pname, expect.get(pname, "")]
        present = False
        for n in names:
            r = all_results[n].get(pname)
            if r is not None:
                present = True
            row.append("" if r is None else f"**{r['status']}** {r['detail']}".replace("|", "\\|"))
        if present:
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--servers", default="nx,mongoeco")
    ap.add_argument("--uri", help="probe this URI instead of starting servers")
    ap.add_argument("--name", default="custom")
    ap.add_argument("--only", action="append", help="substring of check names to run")
    ap.add_argument("--json", help="write results as JSON here")
    ap.add_argument("--md", help="write the markdown matrix here")
    args = ap.parse_args()
    only = set(args.only) if args.only else None
    all_results: dict[str, dict[str, dict[str, str]]] = {}
    if args.uri:
        all_results[args.name] = asyncio.run(run_probes(args.name, args.uri, only))
    else:
        for which in args.servers.split(","):
            with tempfile.TemporaryDirectory(prefix=f"probe-{which}-") as tmp:
                if which == "nx":
                    srv = test_servers.start_nx(tmp)
                elif which == "mongoeco":
                    maybe = test_servers.start_mongoeco(tmp)
                    if maybe is None:
                        continue
                    srv = maybe
                else:
                    raise SystemExit(f"unknown server {which}")
                try:
                    all_results[which] = asyncio.run(run_probes(which, srv.uri, only))
                finally:
                    srv.stop()
    md = render(all_results)
    print(md)
    if args.md:
        Path(args.md).write_text(md + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(all_results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
