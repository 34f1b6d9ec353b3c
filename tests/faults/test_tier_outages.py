"""An outage as the processes of a deployment live it: the API tier (an engine with no
workflow code) starting runs, and worker processes driving them, while the server is
killed or frozen. A start that gives up says which run id it may have recorded, so a
retry with that id never makes a second run; every worker logs the outage when it
begins and when it ends (docs/guides/observability.md)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from engine_core import Engine, StoreUnavailableError
from pikku_mongo import MongoStore
from tests.dashboard.conftest import ui_server
from tests.faults.conftest import LEASE_TTL, MAX_CLOCK_SKEW
from tests.faults.workload import mixed_output
from tests.support.fleet import Fleet
from tests.support.servers import Server

pytestmark = pytest.mark.faults


@contextlib.asynccontextmanager
async def code_less_tier(uri: str) -> AsyncIterator[Engine]:
    """The API tier: an engine that registers nothing, answering within 2 s."""
    store = MongoStore.from_uri(uri, max_clock_skew=MAX_CLOCK_SKEW)
    await store.init()
    try:
        yield Engine(store, lease_ttl=LEASE_TTL, store_timeout="2s")
    finally:
        await store.close()


def _down(server: Server, how: str) -> Callable[[], None]:
    """Take the server away (killed, or frozen: SIGSTOP); returns what brings it back."""
    if how == "kill":
        server.kill()
        return server.restart
    server.freeze()
    return server.thaw


@pytest.mark.parametrize("how", ["kill", "freeze"])
async def test_a_start_that_gives_up_in_an_outage_names_its_run_id_and_a_retry_starts_once(
    fleet: Fleet, fault_uri: str, fault_server: Server, how: str
) -> None:
    fleet.spawn()
    async with code_less_tier(fault_uri) as tier:
        first = await tier.start("mixed", {"n": 1})  # the tier now knows the fleet
        back = _down(fault_server, how)
        try:
            with pytest.raises(StoreUnavailableError) as caught:
                await tier.start("mixed", {"n": 2})  # no run id of the caller's own
        finally:
            back()
        run_id = caught.value.run_id
        assert isinstance(run_id, str) and run_id in str(caught.value)
        assert f"run_id={run_id!r}" in str(caught.value)
        # The caller retries as the message says: one run, whatever the first try did.
        assert await tier.start("mixed", {"n": 2}, run_id=run_id) == run_id
        assert await tier.result(run_id, timeout=60) == mixed_output(2)
        assert await tier.result(first, timeout=60) == mixed_output(1)
        await asyncio.sleep(1)  # a start the frozen server took late would show by now
        runs = await tier.list_runs(workflow="mixed")
        assert sorted(r.run_id for r in runs) == sorted([first, run_id])


@pytest.mark.parametrize("how", ["kill", "freeze"])
async def test_every_worker_logs_an_outage_when_it_begins_and_when_it_ends(
    fleet: Fleet, fault_uri: str, fault_server: Server, how: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Runs in flight on two workers at INFO; the server goes away for 12 s (within
    the driver's 30 s server selection: no command fails, they wait) and comes back:
    each worker logs one WARNING as the outage begins and one INFO as it ends."""
    monkeypatch.setenv("PIKKU_FAULTS_DEBUG", "1")  # the workers log engine_core at INFO
    workers = [fleet.spawn() for _ in range(2)]
    async with code_less_tier(fault_uri) as tier:
        runs = [
            await tier.start("mixed", {"n": n, "seconds": 3}, run_id=f"m-{n}") for n in range(9)
        ]
        deadline = time.monotonic() + 30
        while sum(1 for r in fleet.records() if r["kind"] == "start") < 4:
            assert time.monotonic() < deadline, fleet.stderr()
            await asyncio.sleep(0.05)
        back = _down(fault_server, how)
        try:
            await asyncio.sleep(12)
        finally:
            back()
        for run_id in runs:
            n = int(run_id.split("-")[1])
            assert await tier.result(run_id, timeout=90) == mixed_output(n)
    for i in range(len(workers)):
        text = (fleet.errors / f"worker-{i}.err").read_text(errors="replace")
        began = re.findall(r"the store (?:is unavailable|has not answered)[^\n]*", text)
        ended = re.findall(r"the store is back after [^\n]*", text)
        assert len(began) >= 1 and len(ended) >= 1, f"worker {i} said nothing:\n{text[-3000:]}"
        assert len(began) == len(ended), text[-3000:]


@pytest.mark.parametrize("how", ["kill", "freeze"])
def test_the_ui_answers_within_10_s_in_an_outage_with_a_503_page(
    fault_uri: str, fault_server: Server, how: str
) -> None:
    """``pikku-mongo ui`` with its server gone: ``/runs`` answers within the CLI's 10 s,
    with a 503 page saying the database cannot be reached; once it is back, the page
    works again."""
    with ui_server(fault_uri) as base:
        assert httpx.get(f"{base}/runs", timeout=10).status_code == 200
        back = _down(fault_server, how)
        try:
            page = httpx.get(f"{base}/runs", timeout=10)
        finally:
            back()
        assert page.status_code == 503, page.text
        assert "cannot be reached" in page.text
        deadline = time.monotonic() + 30
        while (again := httpx.get(f"{base}/runs", timeout=10)).status_code != 200:
            assert time.monotonic() < deadline, again.text
            time.sleep(0.5)
