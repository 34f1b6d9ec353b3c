"""Admitters racing on one queue, on both stores: each round reads the queue's state,
the head of its line and saves the state by compare-and-set; however their awaits
interleave, the fleet-wide limits hold and no run is admitted twice."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from engine_core.common.clock import REAL_CLOCK
from engine_core.common.outages import Outages
from engine_core.flow.admission import Admitter
from engine_core.flow.queues import declare
from engine_core.records import RunRecord
from engine_core.store import Store
from engine_core.testing.flow_cases import queued
from tests.conftest import open_store


@pytest.fixture(params=["memory", "mongo", "mongo-targeted"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """These tests also run with targeted polling forced on (the job and line indexes a
    sharded cluster gets)."""
    made = await open_store(request)
    yield made
    await made.close()


class Kicks:
    """The little of a Runtime an admitter uses: it drives the runs it admitted, the
    first ``room`` of them begun in the admitting write (adopted), the rest kicked."""

    def __init__(self, room: int = 0) -> None:
        self.kicked: list[str] = []
        self.adopted: list[RunRecord] = []
        self.outages = Outages()
        self.instance_id = "admitter"
        self.config = SimpleNamespace(lease_ttl=5.0)
        self.clock = REAL_CLOCK
        self._room = room

    def room_to_adopt(self) -> int:
        return self._room

    def adopt(self, run: RunRecord) -> None:
        self.adopted.append(run)
        self._room -= 1

    def kick(self, run_id: str, on_taken: Any = None) -> bool:
        self.kicked.append(run_id)
        return True


async def _running(store: Store) -> list[RunRecord]:
    runs = await store.list_runs(workflow=None, status="running", limit=1000, after=None)
    return runs


async def test_racing_admitters_keep_concurrency_and_key_limits(store: Store) -> None:
    for n in range(30):
        await store.insert_run(queued(f"r{n:02d}", queue_key=f"k{n % 3}"))
    limits = declare("q", concurrency=5, key_concurrency=2)
    kicks = Kicks()
    admitters = [Admitter(store, kicks, limits) for _ in range(8)]  # type: ignore[arg-type]
    for _ in range(4):
        await asyncio.gather(*(a.admit_round() for a in admitters))
    running = await _running(store)
    assert len(running) == 5
    assert max(Counter(r.queue_key for r in running).values()) <= 2
    assert sorted(set(kicks.kicked)) == sorted(r.run_id for r in running)
    state = await store.get_queue_state("q")
    assert state is not None and state.held >= 5
    assert set(state.reserved) <= {r.run_id for r in running}
    assert await store.count_admitted("q") == 5


async def test_a_slot_frees_when_its_run_ends_and_the_next_in_line_goes(store: Store) -> None:
    for n in range(4):
        await store.insert_run(queued(f"r{n}", priority=n))
    limits = declare("q", concurrency=2)
    admitter = Admitter(store, Kicks(), limits)  # type: ignore[arg-type]
    await admitter.admit_round()
    assert sorted(r.run_id for r in await _running(store)) == ["r0", "r1"]
    await store.set_run_status("r0", "cancelled", expect=("running",))
    await admitter.admit_round()
    assert sorted(r.run_id for r in await _running(store)) == ["r1", "r2"]


async def test_a_round_that_died_after_reserving_is_finished_by_the_next(store: Store) -> None:
    await store.insert_run(queued("r0"))
    await store.insert_run(queued("r1"))
    limits = declare("q", concurrency=1)

    class DiesBeforeMoving(Admitter):
        async def _admit(self, run_ids: list[str]) -> None:
            raise RuntimeError("the process died here")

    dying = DiesBeforeMoving(store, Kicks(), limits)  # type: ignore[arg-type]
    try:
        await dying.admit_round()
    except RuntimeError:
        pass
    assert await _running(store) == []
    state = await store.get_queue_state("q")
    assert state is not None and state.reserved == ["r0"]  # reserved, not moved
    await Admitter(store, Kicks(), limits).admit_round()  # type: ignore[arg-type]
    assert [r.run_id for r in await _running(store)] == ["r0"]


class HeldAtSave:
    """A store whose ``save_queue_state`` waits for ``go``: an admitter paused between
    reading the queue and saving it, while another admits."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.reached = asyncio.Event()
        self.go = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def save_queue_state(self, state: Any, *, expect_version: int) -> bool:
        self.reached.set()
        await self.go.wait()
        return await self._store.save_queue_state(state, expect_version=expect_version)


async def test_an_admitter_that_read_an_old_line_admits_nothing_over_the_limit(
    store: Store,
) -> None:
    for n in range(10):
        await store.insert_run(queued(f"r{n}"))
    limits = declare("q", concurrency=5)
    slow_store = HeldAtSave(store)
    slow = Admitter(slow_store, Kicks(), limits)  # type: ignore[arg-type]
    paused = asyncio.ensure_future(slow.admit_round())
    await slow_store.reached.wait()  # it picked r0..r4 from the line it read
    # A run that goes first joins the line; another admitter takes it and r0..r3.
    await store.insert_run(queued("vip", priority=-1))
    await Admitter(store, Kicks(), limits).admit_round()  # type: ignore[arg-type]
    slow_store.go.set()
    assert await paused is True  # its save failed: it must read again, not admit
    running = sorted(r.run_id for r in await _running(store))
    assert running == ["r0", "r1", "r2", "r3", "vip"]
    await slow.admit_round()  # reading again, it finds the queue full
    assert len(await _running(store)) == 5


async def test_runs_admitted_with_room_here_begin_their_first_pass_in_the_same_write(
    store: Store,
) -> None:
    for n in range(5):
        await store.insert_run(queued(f"r{n}"))
    kicks = Kicks(room=3)
    await Admitter(store, kicks, declare("q", concurrency=4)).admit_round()  # type: ignore[arg-type]
    assert [r.run_id for r in kicks.adopted] == ["r0", "r1", "r2"]
    assert kicks.kicked == ["r3"]
    for run in kicks.adopted:
        stored = await store.get_run(run.run_id)
        assert stored is not None and stored.status == "running"
        assert (stored.token, stored.passes, stored.lease_holder) == (1, 1, "admitter")
        assert run.token == 1 and run.open_pass and not stored.pending_pass
    kicked = await store.get_run("r3")
    assert kicked is not None and kicked.pending_pass and kicked.token == 0


async def test_a_queue_that_gains_a_concurrency_limit_counts_the_runs_it_admitted(
    store: Store,
) -> None:
    for n in range(5):
        await store.insert_run(queued(f"r{n}"))
    # Declared with a rate only, the queue's state kept no count of its runs.
    await Admitter(store, Kicks(), declare("q", rate="3/1h")).admit_round()  # type: ignore[arg-type]
    assert len(await _running(store)) == 3
    # Redeclared with a concurrency: the runs admitted before count (the two left in
    # line would fit under the limit if they did not).
    limited = Admitter(store, Kicks(), declare("q", concurrency=3))  # type: ignore[arg-type]
    await limited.admit_round()
    await limited.admit_round()
    assert len(await _running(store)) == 3
