"""What causally consistent reads cost the client: the same work through a proxy that
gives the server's replies a replica set's clock (``operationTime``, ``$clusterTime``),
with the store's causal reads on and off, interleaved in blocks on one store so that
the machine's other load falls on both alike.

    python -m benchmarks.causal_reads [--blocks 60] [--reads 100] [--runs 2] [--steps 20]

Client CPU (``time.process_time`` of this process; the proxy and the server are
processes of their own): per ``get_run`` (a deciding read), and per inline step of a
workflow from ``start`` to ``result`` (the hot path has no deciding read: one write per
step; the result's read is one). Also the session alone (start, advance, end), with no
server. nx-27017 as in every benchmark, or ``MONGODB_URI``'s server behind the proxy.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bson import Timestamp

from benchmarks.common import mongo_server, with_database
from engine_core import Engine, WorkflowContext
from engine_core.testing.builders import make_run
from pikku_mongo import MongoStore
from pikku_mongo.wire.causal import OperationClock
from tests.support.proxy import ProxyProcess

Spent = dict[bool, list[float]]  # causal reads on / off -> [seconds, units done]


async def _noop() -> None:
    return None


async def _measure(uri: str, args: argparse.Namespace) -> tuple[Spent, Spent]:
    store = MongoStore.from_uri(with_database(uri, f"cr_{uuid.uuid4().hex[:8]}"), max_clock_skew=0)
    engine = Engine(store)

    @engine.workflow("noops")
    async def noops(ctx: WorkflowContext, data: Any) -> int:
        for i in range(args.steps):
            await ctx.step(f"s{i}", _noop)
        return int(args.steps)

    clock = store.reads.clock
    reads: Spent = {True: [0.0, 0], False: [0.0, 0]}
    steps: Spent = {True: [0.0, 0], False: [0.0, 0]}
    async with engine:
        await store.insert_run(make_run("r"))
        for block in range(args.blocks):
            causal = block % 2 == 0
            store.reads.clock = clock if causal else None
            started = time.process_time()
            for _ in range(args.reads):
                await store.get_run("r")
            reads[causal][0] += time.process_time() - started
            reads[causal][1] += args.reads
            started = time.process_time()
            for _ in range(args.runs):
                run_id = f"run-{uuid.uuid4().hex}"
                await engine.start("noops", run_id=run_id)
                await engine.result(run_id, timeout=60)
            steps[causal][0] += time.process_time() - started
            steps[causal][1] += args.runs * args.steps
    store.reads.clock = clock
    await store.database.client.drop_database(store.database.name)
    await store.close()
    return reads, steps


def _session_alone(count: int = 20_000) -> float:
    """CPU seconds of one ``causal()`` session, started, advanced and ended."""

    async def run() -> float:
        store = MongoStore.from_uri("mongodb://127.0.0.1:9/x?directConnection=true")
        clock = store.reads.clock
        assert isinstance(clock, OperationClock)
        at = Timestamp(int(time.time()), 1)
        clock.operation_time = at
        clock.cluster_time = {"clusterTime": at, "signature": {"hash": b"\0" * 20, "keyId": 0}}
        started = time.process_time()
        for _ in range(count):
            async with store.reads.causal():
                pass
        spent = (time.process_time() - started) / count
        await store.close()
        return spent

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=60)
    parser.add_argument("--reads", type=int, default=100)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, mongo_server(Path(tmp)) as server:
        hosts = server.uri.split("://", 1)[1].split("/", 1)[0]
        host, _, port = hosts.rpartition(":")
        with ProxyProcess.start(host, int(port)) as proxy:
            proxy.set(stamp_times=True)
            reads, steps = asyncio.run(_measure(proxy.uri(), args))
        label = server.label
    print(f"client CPU, µs ({label}, through a proxy stamping a clock; blocks interleaved)\n")
    print("| measure | causal reads off | causal reads on | difference |")
    print("| --- | ---: | ---: | ---: |")
    for what, spent in (("`get_run`, per read", reads), ("inline step, start to result", steps)):
        off, on = (spent[c][0] / spent[c][1] * 1e6 for c in (False, True))
        print(f"| {what} | {off:.0f} | {on:.0f} | {on - off:+.0f} |")
    print(f"| the session alone (no server) | | {_session_alone() * 1e6:.1f} | |")


if __name__ == "__main__":
    main()
