"""A durable agent's worker process killed with SIGKILL mid-run, on MongoDB: another
process finishes the agent's run, asking the model again only for the request that had
not finished, and the refund the agent made happened once."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from engine_core import Engine
from tests.chaos.agent_worker import register
from tests.support.fleet import Fleet, client_engine, fleet_of

pytestmark = pytest.mark.chaos

REFUND = "support__function_toolset__<agent>.call_tool\\:refund"


@pytest.fixture
def agents(chaos_uri: str, tmp_path: Path) -> Iterator[Fleet]:
    with fleet_of("tests.chaos.agent_worker", chaos_uri, tmp_path) as made:
        yield made


@pytest.fixture
async def agent_client(chaos_uri: str) -> AsyncIterator[Engine]:
    async with client_engine(chaos_uri, register, lease_ttl="1s") as engine:
        yield engine


async def test_a_killed_agent_run_is_finished_by_another_process(
    agents: Fleet, agent_client: Engine
) -> None:
    first = agents.spawn("--hold-request", "2")
    run_id = await agent_client.start("agent-ticket", "Refund order 7, please.")
    # The third model request is in flight; the refund before it is recorded.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        started = [r["index"] for r in agents.records("model-start")]
        steps = (await agent_client.status(run_id)).steps
        if 2 in started and REFUND in steps and steps[REFUND].status == "succeeded":
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError(f"the run never got there: {agents.stderr()}")
    agents.kill(first)
    second = agents.spawn()
    assert await agent_client.result(run_id, timeout=60) == "Order 7 was refunded."
    pids = {first.pid: "first", second.pid: "second"}
    answered = Counter((r["index"], pids[r["pid"]]) for r in agents.records("model"))
    started = Counter((r["index"], pids[r["pid"]]) for r in agents.records("model-start"))
    # Requests 0 and 1 answered once, in the first process; request 2, cut off there,
    # asked again (and answered) only in the second.
    assert answered == {(0, "first"): 1, (1, "first"): 1, (2, "second"): 1}
    assert started == {(0, "first"): 1, (1, "first"): 1, (2, "first"): 1, (2, "second"): 1}
    assert [r["order"] for r in agents.records("refund")] == [7]
    assert [r["order"] for r in agents.records("lookup")] == [7]
    status = await agent_client.status(run_id)
    assert status.steps["support__model.request#2"].attempts == 2  # the lost one counts
