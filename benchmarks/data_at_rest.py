"""What data at rest costs (docs/guides/data-at-rest.md): the client CPU per step of W1
and W3 with every value sealed by ``AesGcmCodec`` against none, on both stores; and
the commands a step's outcome costs on MongoDB as its result grows past
``offload_over`` (1 MiB) into GridFS.

Standalone: ``python -m benchmarks.data_at_rest [--runs 100] [--steps 1000] [--reps 5]``
(starts its own nx-27017 server unless ``MONGODB_URI`` is set). The codec settings
alternate, repetition by repetition, so drift on a shared machine hits both alike;
figures are medians, in ms per step. The suite (``python -m benchmarks``) also runs W1
and W3 with the codec: its "codec" rows.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import tempfile
import time
from collections import Counter
from pathlib import Path

from pymongo import monitoring

from benchmarks.common import (
    Measurement,
    Sizes,
    StoreKind,
    drop_database,
    fresh_db_name,
    mongo_server,
    print_on_off,
    with_database,
)
from benchmarks.ours import w1_sequential, w3_long_run
from engine_core.codecs import AesGcmCodec, PayloadCodec
from engine_core.codecs.sealed_store import SealedStore
from engine_core.testing.builders import begin, done_step, make_run

#: Result sizes of the offload figures: under the limit, and past it.
SIZES = (100, 500_000, 2_000_000, 20_000_000)


def bench_codec() -> PayloadCodec:
    """An ``AesGcmCodec`` with a fresh 256-bit key."""
    return AesGcmCodec(keys={"bench": os.urandom(32)}, current="bench")


async def sealed_run(workload: str, kind: StoreKind, uri: str | None, z: Sizes) -> Measurement:
    """The suite's W1 or W3 with every value sealed by ``AesGcmCodec``: its client CPU per
    step against the plain rows is the codec's cost (docs/guides/data-at-rest.md)."""
    on = uri if kind == "mongo" else None
    if workload == "W1":
        return await w1_sequential(kind, on, z.w1_runs, z.w1_steps, codec=bench_codec())
    return await w3_long_run(kind, on, z.w3_steps, codec=bench_codec())


async def _cpu_per_step(
    workload: str, kind: StoreKind, uri: str | None, size: int, sealed: bool
) -> tuple[float, float]:
    codec = bench_codec() if sealed else None
    if workload == "W1":
        measured = await w1_sequential(kind, uri, size, 10, codec=codec)
    else:
        measured = await w3_long_run(kind, uri, size, codec=codec)
    per_step = 1000 / measured.steps
    return measured.seconds * per_step, measured.extra["cpu_s"] * per_step


def _measure(
    workload: str, kind: StoreKind, uri: str | None, size: int, sealed: bool
) -> tuple[float, float]:
    return asyncio.run(_cpu_per_step(workload, kind, uri, size, sealed))


class _Sent(monitoring.CommandListener):
    def __init__(self) -> None:
        self.sent: Counter[str] = Counter()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        collection = str(event.command.get(event.command_name))
        if not collection.endswith(("leases", "workers")):  # on their own clock
            self.sent[f"{event.command_name} {collection}"] += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


async def offload_commands(base_uri: str) -> list[tuple[int, int, int, float]]:
    """Per result size: (size, commands of the step's write, of them GridFS's, seconds),
    at the engine's seam (what a pass calls to record a step's outcome)."""
    from pikku_mongo import MongoStore

    sent = _Sent()
    name = fresh_db_name("offload")
    uri = with_database(base_uri, name)
    store = MongoStore.from_uri(uri, event_listeners=[sent], max_clock_skew=0)  # one host
    await store.init()
    seam = SealedStore(store, None)
    rows = []
    try:
        for size in SIZES:
            run_id = f"run-{size}"
            await seam.insert_run(make_run(run_id))
            token = await begin(seam, run_id)
            outcome = done_step(run_id, "s", result="r" * size)
            sent.sent.clear()
            began = time.perf_counter()
            await seam.record_steps(run_id, token=token, status="running", outcomes=[outcome])
            seconds = time.perf_counter() - began
            gridfs = sum(n for what, n in sent.sent.items() if "values." in what)
            rows.append((size, sum(sent.sent.values()), gridfs, seconds))
    finally:
        await store.close()
        await drop_database(base_uri, name)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=100, help="W1 runs of 10 steps")
    parser.add_argument("--steps", type=int, default=1000, help="W3 steps")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, mongo_server(Path(tmp)) as server:
        for size, written, gridfs, seconds in asyncio.run(offload_commands(server.uri)):
            print(
                f"offload: a {size:,} B result: {written} commands ({gridfs} of GridFS), "
                f"{seconds * 1000:.1f} ms",
                flush=True,
            )
        for workload, size in (("W1", args.runs), ("W3", args.steps)):
            for kind in ("memory", "mongo"):
                uri = server.uri if kind == "mongo" else None

                measure = functools.partial(_measure, workload, kind, uri, size)
                print_on_off(f"{workload} on {kind}", args.reps, measure, "plain", "sealed")


if __name__ == "__main__":
    main()
