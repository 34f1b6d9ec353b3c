"""What the engine's metrics cost: W1 (workflows of no-op inline steps, one after
another) with no OpenTelemetry SDK and with one configured (an SDK ``MeterProvider``
with an in-memory reader, collected once at the end), on both stores.

Standalone: ``python -m benchmarks.metrics_overhead [--runs 100] [--reps 5]`` (starts
its own nx-27017 server unless ``MONGODB_URI`` is set). The two settings alternate,
repetition by repetition, so drift on a shared machine hits both alike; the figures are
medians of ``--reps`` repetitions, in ms per step: wall time, and this process's CPU
time (what the metrics cost, less exposed to other load on the machine).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

import engine_core.metrics
from benchmarks.common import StoreKind, mongo_server, print_on_off
from benchmarks.ours import w1_sequential


async def _w1(kind: StoreKind, uri: str | None, runs: int, sdk: bool) -> tuple[float, float]:
    if sdk:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        reader = InMemoryMetricReader()
        engine_core.metrics.use_meter_provider(MeterProvider(metric_readers=[reader]))
    try:
        measured = await w1_sequential(kind, uri, runs, 10)
        if sdk:
            assert reader.get_metrics_data() is not None
    finally:
        engine_core.metrics.use_meter_provider(None)
    per_step = 1000 / measured.steps
    return measured.seconds * per_step, measured.extra["cpu_s"] * per_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, mongo_server(Path(tmp)) as server:
        for kind in ("memory", "mongo"):
            uri = server.uri if kind == "mongo" else None
            print_on_off(
                f"W1 on {kind}",
                args.reps,
                lambda sdk, k=kind, u=uri: asyncio.run(_w1(k, u, args.runs, sdk)),  # type: ignore[misc]
                "without an SDK",
                "with one",
            )


if __name__ == "__main__":
    main()
