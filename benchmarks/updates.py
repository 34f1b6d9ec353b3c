"""U1: an update's round trip (docs/guides/values-and-updates.md): the caller's
``engine.update`` to a run parked on ``ctx.wait_for_update``, the run's reply, the answer
back at the caller.

Each sample is a fresh run of ``u1-once`` (wait for one update, reply, end), parked
before the clock starts; caller and run share one engine and one process (the answer is
handed over in process; a caller elsewhere is woken by the change stream it holds open
already). Per sample: the latency of ``engine.update`` (ms; p50 and p90 reported), and
the commands the store sent, by name and collection, while the call was in flight
("before the answer") and until the run's pass let go ("in all"). The floor is one
guarded update of a run-sized document, one at a time (:mod:`benchmarks.floor`), measured
in the same sitting. Target (issue 42): at most 4 commands plus the run's wake-up
(claiming its pass), and a p50 within 3 times the floor. ``round_trip_commands`` counts
the commands before the answer without the wake-up (see ``_NOT_THE_TRIP``): the update
sent, taken, answered, and the wait recorded.

    python -m benchmarks.updates [--uri URI] [--samples 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections import Counter
from typing import Any

from pymongo import monitoring

from benchmarks.common import Measurement, fresh_db_name, mongo_server, with_database
from engine_core import Engine, WorkflowContext

#: How each command is told: its name and the collection it names (a client-level
#: ``bulkWrite`` by the collections of its operations).
_COLLECTION_OF = {"insert", "update", "delete", "find", "findAndModify", "aggregate"}


#: What is not the round trip's own: the run's wake-up (its pass claimed; the worker's
#: look for runs owed a pass, which the update's mark sets off) and the scheduler's look.
_NOT_THE_TRIP = {"findAndModify runs", "find runs", "find schedules"}


class Commands(monitoring.CommandListener):
    """Commands by "name collection" (the store's prefix dropped)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        name = event.command_name
        if name == "getMore":
            return  # the change stream's: the caller's wake-up, held open across calls
        where = ""
        if name in _COLLECTION_OF:
            where = str(event.command.get(name, ""))
        elif name == "bulkWrite":
            spaces = event.command.get("nsInfo") or []
            where = "+".join(sorted(str(s.get("ns", "")).rsplit(".", 1)[-1] for s in spaces))
        self.counts[f"{name} {where.replace('pikku_', '')}".strip()] += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def register(engine: Engine) -> None:
    """``u1-once``: waits for one update "ask", replies with its payload plus one."""

    @engine.workflow("u1-once")
    async def once(ctx: WorkflowContext, data: Any) -> None:
        req = await ctx.wait_for_update("ask")
        if req is not None:
            await req.reply(req.payload + 1)


async def _parked(engine: Engine, run_id: str) -> None:
    """Until the run waits: its wait recorded and its pass let go (a parked run keeps
    its holder's name, its lease lapsed, so the driver is asked, not the record)."""
    while True:
        if not engine._host.driver.driving(run_id):
            steps = await engine.store.get_steps(run_id, ["ask"])
            if steps and steps[0].status == "scheduled":
                return
        await asyncio.sleep(0.005)


async def round_trips(uri: str, samples: int) -> Measurement:
    """``samples`` update round trips (see the module docstring)."""
    from pikku_mongo import MongoStore

    commands = Commands()
    name = fresh_db_name("u1")
    store = MongoStore.from_uri(with_database(uri, name), event_listeners=[commands])
    engine = Engine(store)
    register(engine)
    latencies: list[float] = []
    before: Counter[str] = Counter()
    total: Counter[str] = Counter()
    try:
        async with engine:
            runs = [await engine.start("u1-once") for _ in range(samples + 5)]
            for n, run_id in enumerate(runs):
                await _parked(engine, run_id)
                commands.counts.clear()
                began = time.perf_counter()
                assert await engine.update(run_id, "ask", n) == n + 1
                seconds = time.perf_counter() - began
                answered = Counter(commands.counts)
                await engine.result(run_id, timeout=30)
                while engine._host.driver.driving(run_id):  # noqa: ASYNC110 (its pass lets go)
                    await asyncio.sleep(0.001)
                if n >= 5:  # the first few warm the client and the change stream up
                    latencies.append(seconds)
                    before.update(answered)
                    total.update(commands.counts)
    finally:
        await store.database.client.drop_database(name)
        await store.close()
    count = len(latencies)
    extra: dict[str, float] = {
        "p50_ms": statistics.median(latencies) * 1000,
        "p90_ms": statistics.quantiles(latencies, n=10)[-1] * 1000,
        "commands_before_answer": sum(before.values()) / count,
        "round_trip_commands": sum(n for k, n in before.items() if k not in _NOT_THE_TRIP) / count,
        "commands_in_all": sum(total.values()) / count,
    }
    extra.update({f"before: {k}": v / count for k, v in sorted(before.items())})
    extra.update({f"in all: {k}": v / count for k, v in sorted(total.items())})
    return Measurement(sum(latencies), count, {}, extra)


async def floor_ms(uri: str, ops: int = 400) -> float:
    """One guarded write's wall time here and now (ms), as the suite's floor measures it."""
    from benchmarks.floor import floor_sequential

    measured = await floor_sequential(uri, ops)
    return measured.seconds / measured.steps * 1000


async def measure_all(
    uri: str, progress: Any, failed: Any, into: list[Any], samples: int = 200
) -> None:
    """The suite's U1: the round trips, then the floor of the same sitting."""
    from benchmarks.common import summarise

    progress.stage("U1 mongo round trip")
    try:
        measured = await round_trips(uri, samples)
        floor = await floor_ms(uri)
        measured.extra["floor_ms"] = floor
        measured.extra["p50_over_floor"] = measured.extra["p50_ms"] / floor
    except Exception as exc:
        failed("U1 mongo", exc)
        return
    finally:
        progress.step()
    into.append(summarise("U1", "mongo", "round trip", [measured]))


def report(measured: Measurement) -> str:
    """The figures, one per line."""
    lines = [f"U1 round trips: {measured.steps}"]
    for key, value in measured.extra.items():
        lines.append(f"  {key}: {value:.3f}")
    return "\n".join(lines)


async def _main(uri: str | None, samples: int) -> None:
    if uri is None:
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory() as tmp, mongo_server(Path(tmp)) as server:
            await _main(server.uri, samples)
        return
    measured = await round_trips(uri, samples)
    measured.extra["floor_ms"] = await floor_ms(uri)
    measured.extra["p50_over_floor"] = measured.extra["p50_ms"] / measured.extra["floor_ms"]
    print(report(measured))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uri", help="a MongoDB URI (default: an nx-27017 started here)")
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args(argv)
    asyncio.run(_main(args.uri, args.samples))


if __name__ == "__main__":
    main()
