"""Run mongoeco's MongoDB-wire server in the foreground.

mongoeco (PyPI, needs CPython >= 3.13) ships no console script for its wire
server: the server is the class ``mongoeco.wire.proxy.AsyncMongoEcoProxyServer``.
This launcher wraps it so it can run as a subprocess. It is executed with the
interpreter of the mongoeco venv (see ``tests/support/servers.py``):

    .cache/mongoeco-venv/bin/python tests/support/mongoeco_server.py --port 27018

Once listening it prints ``READY mongodb://HOST:PORT/?directConnection=true``
on stdout. SIGTERM / SIGINT close the server cleanly. Only stdlib + mongoeco.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="mongoeco wire server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 = any free port")
    parser.add_argument(
        "--engine",
        choices=("memory", "sqlite"),
        default="memory",
        help="storage engine (default: memory)",
    )
    parser.add_argument(
        "--sqlite-path",
        default=":memory:",
        help="SQLite file for --engine sqlite",
    )
    parser.add_argument(
        "--dialect",
        default=None,
        help="MongoDB dialect, e.g. 7.0 or 8.0 (mongoeco default: 7.0)",
    )
    parser.add_argument(
        "--pymongo-profile",
        default=None,
        help="PyMongo API profile, e.g. 4.9 or 4.13 (mongoeco default: 4.9)",
    )
    return parser.parse_args(argv)


async def _serve(args: argparse.Namespace) -> None:
    from mongoeco.wire.proxy import AsyncMongoEcoProxyServer

    engine: object
    if args.engine == "memory":
        from mongoeco.engines.memory import MemoryEngine

        engine = MemoryEngine()
    else:
        from mongoeco.engines.sqlite import SQLiteEngine

        engine = SQLiteEngine(args.sqlite_path)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)

    proxy = AsyncMongoEcoProxyServer(
        engine=engine,  # type: ignore[arg-type]
        host=args.host,
        port=args.port,
        mongodb_dialect=args.dialect,
        pymongo_profile=args.pymongo_profile,
    )
    async with proxy:
        print(f"READY {proxy.address.uri}", flush=True)
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    if sys.version_info < (3, 13):
        print("mongoeco needs Python >= 3.13", file=sys.stderr)
        return 2
    asyncio.run(_serve(_parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
