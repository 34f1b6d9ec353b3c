"""The wire-server probes of multi-document writes: ``update_many``, ``delete_many``,
``bulk_write``, ``count_documents``."""

from __future__ import annotations

from pymongo import DeleteOne, InsertOne, UpdateOne

from tests.servers_probe.probing import Check, Ctx, diff, ok, probe, seeded, t


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
