"""A queue's state stays small whatever its limits (issue 19, case 2), on both stores.

It used to list every admitted run that had not ended and one time per admission in
the rate window: ``rate="2000000/1h"`` at its limit needed about 25 MiB,
``concurrency=1000000`` with 100,000 runs in flight about 20 MiB, and past 16 MiB
(MongoDB's document limit) admission failed for good. Here the admitter runs real
rounds against the store's real queue state, with a line that never empties and runs
that are never driven (so millions of admissions take seconds), on a simulated clock;
the state is measured encoded as BSON. Also: the rate limit, kept in a bounded number
of entries, still never admits more than N in any window.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

import bson
import pytest

import engine_core.flow.admission as admission
from engine_core.common.clock import REAL_CLOCK, Clock
from engine_core.common.outages import Outages
from engine_core.flow.admission import WINDOW_ENTRIES, Admitter
from engine_core.flow.queues import declare
from engine_core.flow.rate_windows import UNSAVED_KEYS
from engine_core.records import RunRecord
from engine_core.store import Store
from engine_core.testing.builders import make_run
from engine_core.testing.flow_cases import queued
from engine_core.testing.virtual_clock import VirtualClock
from pikku_mongo import MongoStore
from pikku_mongo.store.queue_ops import _state_to_doc

LIMIT = 64 * 1024


class Runtime:
    """The little of a Runtime an admitter uses: nothing is driven here."""

    def __init__(self, clock: Clock = REAL_CLOCK) -> None:
        self.clock = clock
        self.outages = Outages()
        self.instance_id = "admitter"
        self.config = SimpleNamespace(lease_ttl=5.0)
        self.kicks = 0

    def room_to_adopt(self) -> int:
        return 0

    def adopt(self, run: RunRecord) -> None:  # pragma: no cover - no room
        raise AssertionError("no room to adopt")

    def kick(self, run_id: str, on_taken: Any = None) -> bool:
        self.kicks += 1
        return True


class EndlessLine:
    """The store under test for the queue's state; a line that never empties, runs
    that move at once when admitted and never end, counted here."""

    def __init__(self, store: Store, depth: int) -> None:
        self._store = store
        self.line = [queued(uuid.uuid4().hex) for _ in range(depth)]
        self.admitted = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def queued_runs(self, queue: str, *, limit: int, after: Any = None) -> list[RunRecord]:
        return self.line[:limit]

    async def admit_runs(self, runs: Sequence[RunRecord]) -> int:
        self.admitted += len(runs)
        return len(runs)

    async def get_runs(
        self, run_ids: Sequence[str], *, status_in: Sequence[str] | None = None
    ) -> list[RunRecord]:
        # Every run admitted was moved at once and is running still.
        if status_in is not None and "running" not in status_in:
            return []
        return [make_run(run_id) for run_id in run_ids]

    async def count_admitted(self, queue: str) -> int:
        return self.admitted


async def _state_size(store: Store) -> int:
    state = await store.get_queue_state("q")
    assert state is not None
    size = len(bson.encode(_state_to_doc(state)))
    if isinstance(store, MongoStore):
        raw = await store.queues.find_one({})
        assert raw is not None
        size = max(size, len(bson.encode(raw)))
    return size


async def test_a_rate_of_two_million_an_hour_at_its_limit_keeps_the_state_small(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = VirtualClock()
    monkeypatch.setattr(admission, "BATCH", 10_000)  # 200 rounds, not 20,000
    line = EndlessLine(store, 10_000)
    runtime = Runtime(clock)
    admitter = Admitter(line, runtime, declare("q", rate="2000000/1h"))  # type: ignore[arg-type]
    for _ in range(200):
        await admitter.admit_round()
        await clock.advance(17.9)  # the whole two million within the hour
    assert line.admitted == 2_000_000
    assert not await admitter.admit_round()  # at the limit: nothing more
    assert line.admitted == 2_000_000
    size = await _state_size(store)
    assert size < LIMIT, f"the queue's state is {size} bytes"
    state = await store.get_queue_state("q")
    assert state is not None and len(state.window) <= WINDOW_ENTRIES
    await clock.advance("1h")  # the window has passed: admission goes on
    await admitter.admit_round()
    assert line.admitted == 2_010_000


async def test_a_million_slots_with_100000_runs_in_flight_keep_the_state_small(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    line = EndlessLine(store, 100)
    limits = declare("q", concurrency=1_000_000, rate="2000000/1h")
    admitter = Admitter(line, Runtime(), limits)  # type: ignore[arg-type]
    for _ in range(1000):
        await admitter.admit_round()
    assert line.admitted == 100_000
    size = await _state_size(store)
    assert size < LIMIT, f"the queue's state is {size} bytes"
    state = await store.get_queue_state("q")
    assert state is not None and state.held == 100_000 and len(state.reserved) <= 100


async def test_the_bounded_rate_window_never_admits_more_than_n_in_any_window(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = VirtualClock()
    monkeypatch.setattr(admission, "BATCH", 7)
    line = EndlessLine(store, 7)
    admitter = Admitter(line, Runtime(clock), declare("q", rate="50/10s"))  # type: ignore[arg-type]
    rng = random.Random(19)
    log: list[tuple[datetime, int]] = []
    start = clock.now()
    while clock.now() < start + timedelta(seconds=120):
        before = line.admitted
        await admitter.admit_round()
        if line.admitted > before:
            log.append((clock.now(), line.admitted - before))
        await clock.advance(timedelta(milliseconds=rng.choice([1, 5, 20, 100, 400])))
    per = timedelta(seconds=10)
    worst = max(sum(n for t, n in log if end - per < t <= end) for end, _ in log)
    assert worst <= 50
    assert line.admitted >= 11 * 50 * 0.8  # conservative, not starved


class KeyedLine(EndlessLine):
    """A fair line whose every run has a key of its own, never seen before (so each
    round meets ``depth`` new keys), in turns that grow round by round."""

    def __init__(self, store: Store, depth: int) -> None:
        super().__init__(store, 0)
        self.depth = depth
        self.round = 0

    async def queued_runs(self, queue: str, *, limit: int, after: Any = None) -> list[RunRecord]:
        self.round += 1
        made = (uuid.uuid4().hex for _ in range(min(limit, self.depth)))
        return [queued(r, queue_key=f"tenant-{r}", fair=True, queue_turn=self.round) for r in made]


async def test_a_fair_queue_with_a_key_rate_over_20000_keys_keeps_the_state_small(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = VirtualClock()
    line = KeyedLine(store, admission.BATCH)
    limits = declare("q", key_rate="5/1m", fairness="key")
    admitter = Admitter(line, Runtime(clock), limits)  # type: ignore[arg-type]
    rounds = 20_000 // admission.BATCH
    for _ in range(rounds):
        await admitter.admit_round()
        await clock.advance(1)
    assert line.admitted == 20_000  # every key had room: none is held back by the others
    size = await _state_size(store)
    # One entry at most per key whose window may not hold its admissions yet (the last
    # round's keys: each round saves the windows of its own), at most UNSAVED_KEYS:
    # about 8 KB here with 40-character keys, whatever the number of keys seen.
    assert size < 16 * 1024, f"the queue's state is {size} bytes"
    state = await store.get_queue_state("q")
    assert state is not None and len(state.key_unsaved) <= UNSAVED_KEYS
    assert state.turn == rounds
