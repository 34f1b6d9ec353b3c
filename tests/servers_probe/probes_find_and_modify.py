"""The wire-server probes of ``find_one_and_update``: its filters, sort, return
document, upserts and update operators (the engine's claim and write shapes)."""

from __future__ import annotations

from typing import Any

from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError, PyMongoError

from tests.servers_probe.probing import Check, Ctx, Doc, diff, fmt_exc, ok, probe, seeded, t


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
