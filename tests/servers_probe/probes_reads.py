"""The wire-server probes of reads: sorted finds, keyset pagination, aggregation pipelines."""

from __future__ import annotations

from typing import Any

from tests.servers_probe.probing import Check, Ctx, Doc, diff, ok, probe, t


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
