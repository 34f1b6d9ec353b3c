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

from tests.faults.workload import register
from tests.support.execution_log import LOG_PATH
from tests.support.fleet import serve_until_killed, worker_engine, worker_parser


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
    engine = worker_engine(args)
    register(engine)
    await serve_until_killed(engine)


def main() -> None:
    parser = worker_parser(lease_ttl="2s", recovery_interval="1s", max_clock_skew="250ms")
    args = parser.parse_args()
    LOG_PATH["path"] = args.log
    logging.basicConfig(level=logging.WARNING, format="worker %(process)d %(asctime)s %(message)s")
    if os.environ.get("PIKKU_FAULTS_DEBUG"):
        logging.getLogger("engine_core").setLevel(logging.INFO)
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
