"""A forking process for ``test_fork_crash``: it forks a run and stops dead (the test
kills it) between two of the fork's writes: after the steps (``--at steps``) or after
the run (``--at run``). It prints ``between`` when it got there."""

from __future__ import annotations

import argparse
import asyncio
import sys

from engine_core import Engine
from engine_core.records import RunRecord
from pikku_mongo import MongoStore


async def _park() -> None:
    print("between", flush=True)
    await asyncio.sleep(3600)


def pausing(store: MongoStore, at: str) -> None:
    """Make ``store`` park forever at one point of a fork, for a kill to land: before
    the fork's run is written (``steps``) or before its marker is taken (``run``)."""
    insert_run, unmark = store.insert_run, store.fork_ops._unmark

    async def insert_then(run: RunRecord) -> RunRecord | None:
        if at == "steps" and run.forked_from is not None:
            await _park()
        return await insert_run(run)

    async def unmark_then(packed_id: str) -> bool:
        if at == "run":
            await _park()
        return await unmark(packed_id)

    store.insert_run = insert_then  # type: ignore[method-assign]
    store.fork_ops._unmark = unmark_then  # type: ignore[method-assign]


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("uri")
    parser.add_argument("run_id")
    parser.add_argument("fork_id")
    parser.add_argument("--at", default="steps")
    args = parser.parse_args(argv)
    store = MongoStore.from_uri(args.uri, max_clock_skew=0)
    pausing(store, args.at)
    await store.init()
    engine = Engine(store)
    await engine.fork(args.run_id, new_run_id=args.fork_id)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
