"""The wire-server probes of the basics: inserts, duplicate keys, unique indexes,
indexes created twice, TTL indexes."""

from __future__ import annotations

import asyncio
import datetime as dt

from pymongo import ASCENDING
from pymongo.errors import DuplicateKeyError, PyMongoError

from tests.servers_probe.probing import UTC, Check, Ctx, diff, fmt_exc, ok, probe


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
