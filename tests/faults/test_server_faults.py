"""The server goes away under a fleet: killed and restarted, frozen past the lease, or
behind a connection-resetting proxy. Real worker processes, a real wire server.

Every run must complete with its output, and no step whose success was recorded may
run again (counted in the workers' side-effect log, not from the store)."""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from typing import Any

import pytest

from engine_core import Engine, RunStatus
from engine_core.records import TERMINAL
from pikku_mongo.wire import retry
from tests.faults.workload import assert_no_step_ran_after_its_success, mixed_output
from tests.support.fleet import Fleet
from tests.support.proxy import ProxyProcess
from tests.support.servers import Server

pytestmark = pytest.mark.faults

RUNS = 100


async def start_mixed(client: Engine, count: int = RUNS, **data: Any) -> list[str]:
    return [
        await client.start("mixed", {"n": i, **data}, run_id=f"mixed-{i:03d}") for i in range(count)
    ]


async def wait_started(fleet: Fleet, count: int, limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while sum(1 for r in fleet.records() if r["kind"] == "start") < count:
        assert time.monotonic() < deadline, f"fewer than {count} steps started\n{fleet.stderr()}"
        await asyncio.sleep(0.05)


async def wait_terminal(
    client: Engine, runs: list[str], limit: float, stall: float = 45
) -> dict[str, RunStatus]:
    """Every run's status once all are terminal, at the deadline, or once no run has
    ended for ``stall`` seconds (a stuck fleet): one query a poll."""
    deadline = time.monotonic() + limit
    ended, progress = -1, time.monotonic()
    while True:
        seen = {r.run_id: r for r in await client.list_runs(limit=len(runs) + 10)}
        done = sum(1 for r in runs if r in seen and seen[r].status in TERMINAL)
        if done == len(runs):
            return seen
        now = time.monotonic()
        if done != ended:
            ended, progress = done, now
        if now > deadline or now - progress > stall:
            return seen
        await asyncio.sleep(0.5)


async def assert_all_completed(
    client: Engine, statuses: dict[str, RunStatus], fleet: Fleet
) -> None:
    wrong = {
        run_id: (status.status, (status.error or {}).get("message", "")[:300])
        for run_id, status in statuses.items()
        if status.status != "completed"
        or status.output != mixed_output(int(run_id.rsplit("-", 1)[1]))
    }
    if not wrong:
        return
    kinds = Counter(status for status, _ in wrong.values())
    details = []
    for run_id in list(wrong)[:3]:
        run = await client.store.get_run(run_id)
        steps = await client.store.load_steps(run_id)
        lease = await client.store.leases.find_one({"_id": f"run:{run_id}"})  # type: ignore[attr-defined]
        details.append(f"{run}\n  steps: {steps}\n  lease: {lease}")
    raise AssertionError(
        f"{len(wrong)} runs did not complete ({dict(kinds)}): {list(wrong.items())[:5]}\n"
        + "\n".join(details)
        + "\n"
        + fleet.stderr(1500)
    )


async def outage(
    fleet: Fleet, client: Engine, server: Server, down: float, *, uri: str | None = None
) -> None:
    for _ in range(2):
        fleet.spawn(uri=uri)
    runs = await start_mixed(client)
    await wait_started(fleet, 40)
    server.kill()
    await asyncio.sleep(down)
    server.restart()
    limit = float(os.environ.get("PIKKU_FAULTS_LIMIT", 120))
    statuses = await wait_terminal(client, runs, limit=limit + down)
    await assert_all_completed(client, statuses, fleet)
    await assert_no_step_ran_after_its_success(client, runs, fleet.records())


async def test_a_3s_server_outage_with_100_runs_in_flight(
    fleet: Fleet, client: Engine, fault_server: Server
) -> None:
    """Shorter than one server selection (30 s by default): the store's retries ride it
    out."""
    await outage(fleet, client, fault_server, down=3)


@pytest.mark.slow
async def test_a_30s_server_outage_with_100_runs_in_flight(
    fleet: Fleet, client: Engine, fault_server: Server
) -> None:
    """As long as one default server selection (30 s), with the clients as users make
    them: every run completes, and no step that succeeded runs again."""
    await outage(fleet, client, fault_server, down=30)


async def test_an_outage_past_the_stores_retry_budget_is_waited_out(
    fleet: Fleet, client: Engine, fault_server: Server
) -> None:
    """The workers select a server for 1 s at most, so their store gives up retrying
    (``retry.MAX_SECONDS``) well within the outage and raises StoreUnavailableError:
    passes and workers wait the outage out (``engine_core.common.outages``) and carry on."""
    uri = f"{fleet.uri}{'&' if '?' in fleet.uri else '?'}serverSelectionTimeoutMS=1000"
    await outage(fleet, client, fault_server, down=retry.MAX_SECONDS + 3, uri=uri)
    assert "the store is unavailable" in fleet.stderr(100_000), fleet.stderr()


async def test_a_server_frozen_longer_than_the_lease(
    fleet: Fleet, client: Engine, fault_server: Server
) -> None:
    for _ in range(2):
        fleet.spawn()
    runs = await start_mixed(client, 60)
    await wait_started(fleet, 30)
    with fault_server.frozen():
        await asyncio.sleep(6)  # three lease lifetimes: every lease lapses meanwhile
    statuses = await wait_terminal(client, runs, limit=120)
    await assert_all_completed(client, statuses, fleet)
    await assert_no_step_ran_after_its_success(client, runs, fleet.records())


async def test_connections_reset_at_random(
    fleet: Fleet, client: Engine, fault_server: Server
) -> None:
    with ProxyProcess.start(fault_server.host, fault_server.port, seed=12) as proxy:
        database = fleet.uri.split("://", 1)[1].split("/", 1)[1].split("?", 1)[0]
        for _ in range(2):
            fleet.spawn(uri=proxy.uri(database))
        proxy.set(reset_rate=0.04)
        runs = await start_mixed(client, 40)
        statuses = await wait_terminal(client, runs, limit=120)
        stats = proxy.stats()
    assert stats["resets"] >= 10, stats
    await assert_all_completed(client, statuses, fleet)
    await assert_no_step_ran_after_its_success(client, runs, fleet.records())
