"""A forking process for ``test_fork_crash``: it forks a run and stops dead (the test
kills it) between two of the fork's writes: after the steps (``--at steps``) or after
the run (``--at run``). It prints ``between`` when it got there."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from engine_core import Engine
from engine_core.records import RunRecord
from pikku_mongo import MongoStore


class Pausing(MongoStore):
    """A MongoStore that parks forever at one point of a fork, for a kill to land."""

    at = "steps"

    async def _park(self) -> None:
        print("between", flush=True)
        await asyncio.sleep(3600)

    async def insert_run(self, run: RunRecord) -> RunRecord | None:
        if self.at == "steps" and run.forked_from is not None:
            await self._park()
        return await super().insert_run(run)

    async def _unmark(self, packed_id: str) -> bool:
        if self.at == "run":
            await self._park()
        return await super()._unmark(packed_id)


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("uri")
    parser.add_argument("run_id")
    parser.add_argument("fork_id")
    parser.add_argument("--at", default="steps")
    args = parser.parse_args(argv)
    Pausing.at = args.at
    store: Any = Pausing.from_uri(args.uri, max_clock_skew=0)
    await store.init()
    engine = Engine(store)
    await engine.fork(args.run_id, new_run_id=args.fork_id)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
