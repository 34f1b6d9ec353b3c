"""A W5 worker process: serves an engine on MongoStore with the dispatch workflow and its
step function registered, until its standard input closes.

Prints ``ready`` once serving, then (at the end) one JSON line with the MongoDB commands
it sent while the workload ran. Started by the suite as::

    python -m benchmarks.worker --uri mongodb://127.0.0.1:PORT/db?directConnection=true
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys

from benchmarks.common import CommandCounter, register_dispatch
from engine_core import Engine


async def serve(uri: str, concurrency: int, targeted: bool) -> dict[str, int]:
    from pikku_mongo import MongoStore

    counter = CommandCounter()
    store = MongoStore.from_uri(
        uri, event_listeners=[counter], targeted_polling=True if targeted else None
    )
    engine = Engine(store, concurrency=concurrency)
    register_dispatch(engine, steps_function=True)
    loop = asyncio.get_running_loop()
    try:
        async with engine:
            counter.reset()  # index creation and the startup sweep are not the workload
            print("ready", flush=True)
            await loop.run_in_executor(None, sys.stdin.read)  # returns when stdin closes
            commands = counter.snapshot()
    finally:
        await store.close()
    return commands


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uri", required=True, help="MongoDB URI naming the database")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--targeted-polling", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    commands = asyncio.run(serve(args.uri, args.concurrency, args.targeted_polling))
    print(json.dumps({"commands": commands}), flush=True)


if __name__ == "__main__":
    main()
