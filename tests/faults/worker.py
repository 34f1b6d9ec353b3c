"""A worker process for the fault tests: serves the workload until killed.

python -m tests.faults.worker URI LOG [--lease-ttl 2s] [--recovery-interval 1s]
                              [--max-clock-skew 250ms] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys
from typing import Any

from pymongo import AsyncMongoClient

from engine_core import Engine
from pikku_mongo import MongoStore
from tests.faults.workload import LOG_PATH, register


def dump_tasks() -> None:
    """SIGUSR1: every asyncio task's await chain to stderr, and whether each client's
    topology lock is held (where is a stuck worker waiting?)."""
    for task in asyncio.all_tasks():
        print(f"--- {task.get_name()} ({'cancelling' if task.cancelling() else 'pending'})",
              file=sys.stderr)  # fmt: skip
        coro: Any = task.get_coro()
        while coro is not None:
            frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
            if frame is not None:
                print(f"    {frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}",
                      file=sys.stderr)  # fmt: skip
            coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    for client in [o for o in gc.get_objects() if isinstance(o, AsyncMongoClient)]:
        lock = client._topology._lock
        waiters = len(getattr(lock, "_waiters", None) or ())
        print(f"--- topology lock of client {id(client):x}: locked={lock.locked()} "
              f"waiters={waiters}", file=sys.stderr)  # fmt: skip
    sys.stderr.flush()


async def serve(args: argparse.Namespace) -> None:
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, dump_tasks)
    store = MongoStore.from_uri(args.uri, max_clock_skew=args.max_clock_skew)
    engine = Engine(
        store,
        lease_ttl=args.lease_ttl,
        recovery_interval=args.recovery_interval,
        undispatched_after=args.lease_ttl,
        concurrency=args.concurrency,
    )
    register(engine)
    async with engine:
        print("ready", flush=True)
        await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("uri")
    parser.add_argument("log")
    parser.add_argument("--lease-ttl", default="2s")
    parser.add_argument("--recovery-interval", default="1s")
    parser.add_argument("--max-clock-skew", default="250ms")
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    LOG_PATH["path"] = args.log
    logging.basicConfig(level=logging.WARNING, format="worker %(process)d %(asctime)s %(message)s")
    if os.environ.get("PIKKU_FAULTS_DEBUG"):
        logging.getLogger("engine_core").setLevel(logging.INFO)
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
