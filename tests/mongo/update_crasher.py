"""A worker process for ``test_update_crash``: it serves ``desk`` and stops dead (the
test kills it) after it took an update and before it answered (``--at wait``), or after
the answer was written to the update and before its reply step was recorded (``--at
answer``). It prints ``between`` when it got there."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from engine_core import Engine, WorkflowContext
from pikku_mongo import MongoStore


async def _park() -> None:
    print("between", flush=True)
    await asyncio.sleep(3600)


def register(engine: Engine, at: str | None) -> None:
    """``desk``: takes one update "ask", runs a step on it, answers with who answered."""

    async def work(n: int) -> int:
        if at == "wait":
            await _park()
        return n + 1

    @engine.workflow("desk")
    async def desk(ctx: WorkflowContext, data: Any) -> Any:
        req = await ctx.wait_for_update("ask")
        assert req is not None
        done = await ctx.step("work", work, req.payload, retries=2)
        await req.reply({"value": done, "by": os.getpid()})
        return done


def pausing(store: MongoStore) -> None:
    """Park forever once an answer is written, before its reply step is recorded."""
    answer = store.answer_update

    async def answer_then(*args: Any, **kwargs: Any) -> Any:
        stored = await answer(*args, **kwargs)
        await _park()
        return stored

    store.answer_update = answer_then  # type: ignore[method-assign]


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("uri")
    parser.add_argument("--at", default="wait")
    args = parser.parse_args(argv)
    store = MongoStore.from_uri(args.uri, max_clock_skew=0)
    if args.at == "answer":
        pausing(store)
    engine = Engine(store, lease_ttl="1s", recovery_interval="0.5s", undispatched_after="1s")
    register(engine, args.at)
    async with engine:
        print("serving", flush=True)
        await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
