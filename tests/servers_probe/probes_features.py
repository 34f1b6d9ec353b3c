"""The wire-server probes of replica-set features: change streams, transactions."""

from __future__ import annotations

import time

from pymongo.errors import PyMongoError

from tests.servers_probe.probing import Check, Ctx, diff, fmt_exc, ok, probe


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
