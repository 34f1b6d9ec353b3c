"""Conformance cases for flow control per key: fair turns, ``key_rate`` windows, the
keys waiting in a line, debounce windows."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta
from typing import Any

from engine_core.common.clock import utcnow
from engine_core.records import (
    TERMINAL,
    LinePage,
    QueueState,
    RunRecord,
    debounce_run_id,
)
from engine_core.store import Store
from engine_core.testing.builders import make_run


def queued(run_id: str, **extra: Any) -> RunRecord:
    """A run started on queue ``q``, waiting."""
    fields: dict[str, Any] = {"status": "queued", "pending_pass": False, "queue": "q", **extra}
    return make_run(run_id, **fields)


def fair(run_id: str, key: str | None, second: float = 0.0, **extra: Any) -> RunRecord:
    """A run started on the fair queue ``q`` with ``key``, ``second`` after a base time."""
    at = utcnow() + timedelta(seconds=second)
    return queued(run_id, queue_key=key, fair=True, created_at=at, updated_at=at, **extra)


def debounced(input: Any = None, key: str = "k", workflow: str = "wf") -> RunRecord:
    """A run as a debounced start records it (its id is the store's to give)."""
    return make_run(
        "unused", workflow, status="queued", pending_pass=False, input=input, debounce_key=key
    )


async def line_of(store: Store, queue: str = "q") -> list[str]:
    """The ids of the runs in the queue's line, in order."""
    return [r.run_id for r in await store.queued_runs(queue, limit=100)]


class FlowKeyCases:
    """What a store must do for fair lines, key windows and debounced starts."""

    async def test_a_fair_line_takes_the_keys_in_turn(self, store: Store) -> None:
        """A fair line takes the keys in turn."""
        specs = [("a0", "a"), ("a1", "a"), ("a2", "a"), ("b0", "b"), ("b1", "b"), ("n0", None)]
        for second, (run_id, key) in enumerate(specs):
            await store.insert_run(fair(run_id, key, second))
        await store.insert_run(fair("late", "c", 10, not_before=utcnow() + timedelta(hours=1)))
        await store.insert_run(queued("fifo", created_at=utcnow() + timedelta(seconds=20)))
        await store.insert_run(fair("urgent", "a", 30, priority=-1))
        # Runs without a turn first among equal priorities, then turn by turn.
        assert await line_of(store) == ["urgent", "fifo", "a0", "b0", "n0", "a1", "b1", "a2"]
        turns = {r.run_id: r.queue_turn for r in await store.get_runs(["a2", "b1", "fifo"])}
        assert turns == {"a2": 2, "b1": 1, "fifo": None}
        [*_, b0, n0] = (await store.queued_runs("q", limit=5))[:5]
        page = LinePage(n0.priority, n0.created_at, n0.run_id, n0.queue_turn)
        assert [r.run_id for r in await store.queued_runs("q", limit=2, after=page)] == [
            "a1",
            "b1",
        ]
        assert b0.run_id == "b0"
        assert await store.count_waiting_keys("q") == {"a": 4, "b": 2, None: 2}
        assert await store.count_waiting_keys("other") == {}

    async def test_a_key_back_from_idle_starts_at_the_queues_turn(self, store: Store) -> None:
        """A key back from idle starts at the queue's turn."""
        await store.insert_run(fair("a0", "a"))
        assert await store.save_queue_state(QueueState("q", version=1, turn=7), expect_version=0)
        await store.insert_run(fair("a1", "a", 1))
        await store.insert_run(fair("b0", "b", 2))
        await store.insert_run(fair("b1", "b", 3))
        turns = {r.run_id: r.queue_turn for r in await store.get_runs(["a0", "a1", "b0", "b1"])}
        assert turns == {"a0": 0, "a1": 7, "b0": 7, "b1": 8}
        # Concurrent starts of one key take turns one after the other.
        await asyncio.gather(*(store.insert_run(fair(f"c{i}", "c", 4 + i)) for i in range(6)))
        runs = await store.get_runs([f"c{i}" for i in range(6)])
        assert sorted(r.queue_turn or 0 for r in runs) == [7, 8, 9, 10, 11, 12]

    async def test_a_fair_run_takes_its_turn_when_it_joins_the_line(self, store: Store) -> None:
        """A fair run takes its turn when it joins the line."""
        due = utcnow() - timedelta(seconds=1)
        await store.insert_run(fair("later", "a", not_before=due))
        await store.save_queue_state(QueueState("q", version=1, turn=3), expect_version=0)
        [released] = await store.release_delayed_runs(await store.find_delayed_runs(utcnow(), 10))
        assert released.queue_turn == 3
        stored = await store.get_run("later")
        assert stored is not None and stored.queue_turn == 3
        await store.insert_run(fair("x", "a", 1, status="failed", pending_pass=False))
        back = replace(fair("x", "a", 1), status="queued")
        again = await store.reenter_run(back, expect=("failed",))
        assert again is not None and again.queue_turn == 4
        assert await line_of(store) == ["later", "x"]

    async def test_key_windows_round_trip_and_a_late_save_loses(self, store: Store) -> None:
        """Key windows round trip and a late save loses."""
        assert await store.get_key_windows("q", ["a", None]) == {}
        now = utcnow()
        await store.save_key_windows("q", {"a": [(now, 2)], None: [(now, 1)]}, version=3)
        await store.save_key_windows("other", {"a": [(now, 9)]}, version=1)
        got = await store.get_key_windows("q", ["a", None, "b"])
        assert {k: (w.window, w.version) for k, w in got.items()} == {
            "a": ([(now, 2)], 3),
            None: ([(now, 1)], 3),
        }
        later = now + timedelta(seconds=1)
        await store.save_key_windows("q", {"a": [(later, 5)]}, version=2)  # late: loses
        await store.save_key_windows("q", {None: [(later, 4)]}, version=4)
        got = await store.get_key_windows("q", ["a", None])
        assert (got["a"].window, got["a"].version) == ([(now, 2)], 3)
        assert (got[None].window, got[None].version) == ([(later, 4)], 4)

    async def test_the_state_keeps_its_turn_and_unsaved_key_admissions(self, store: Store) -> None:
        """The state keeps its turn and unsaved key admissions."""
        now = utcnow()
        state = QueueState(
            "q", version=1, turn=12, key_unsaved=[("a", now, 3, 1), (None, now, 1, 1)]
        )
        assert await store.save_queue_state(state, expect_version=0)
        got = await store.get_queue_state("q")
        assert got is not None and got.turn == 12
        assert got.key_unsaved == [("a", now, 3, 1), (None, now, 1, 1)]
        assert await store.save_queue_state(QueueState("q", version=2), expect_version=1)
        got = await store.get_queue_state("q")
        assert got is not None and (got.turn, got.key_unsaved) == (0, [])

    async def test_a_debounced_start_makes_then_joins_the_pending_run(self, store: Store) -> None:
        """A debounced start makes then joins the pending run."""
        first, made = await store.debounce_run(debounced(1), quiet=30, timeout=None)
        assert made and first == debounce_run_id("wf", "k", 0)
        run = await store.get_run(first)
        assert run is not None and run.status == "queued" and run.input == 1
        assert run.debounce_key == "k" and run.not_before is not None
        due = run.not_before
        assert abs((due - utcnow()).total_seconds() - 30) < 5
        second, made = await store.debounce_run(debounced({"v": 2}), quiet=60, timeout=None)
        assert (second, made) == (first, False)
        run = await store.get_run(first)
        assert run is not None and run.input == {"v": 2} and run.not_before is not None
        assert run.not_before > due
        # A shorter quiet period never brings the run forward.
        await store.debounce_run(debounced(3), quiet=1, timeout=None)
        run = await store.get_run(first)
        assert run is not None and run.input == 3 and run.not_before is not None
        assert run.not_before > due
        other, made = await store.debounce_run(debounced(4, key="k2"), quiet=30, timeout=None)
        assert made and other != first
        elsewhere, made = await store.debounce_run(debounced(5, workflow="w2"), quiet=1, timeout=1)
        assert made and elsewhere not in (first, other)

    async def test_a_debounce_window_is_bounded_by_its_timeout(self, store: Store) -> None:
        """A debounce window is bounded by its timeout."""
        run_id, _ = await store.debounce_run(debounced(1), quiet=30, timeout=40)
        first = await store.get_run(run_id)
        assert first is not None and first.not_before is not None
        await store.debounce_run(debounced(2), quiet=100, timeout=None)
        run = await store.get_run(run_id)
        assert run is not None and run.not_before is not None
        bound = (run.not_before - first.created_at).total_seconds()
        assert 35 < bound <= 41  # the first start's bound holds
        await store.debounce_run(debounced(3), quiet=30, timeout=31)  # a smaller bound
        run = await store.get_run(run_id)
        assert run is not None and run.not_before is not None
        assert (run.not_before - first.created_at).total_seconds() <= bound

    async def test_a_released_or_cancelled_window_ends(self, store: Store) -> None:
        """A released or cancelled window ends."""
        first, _ = await store.debounce_run(debounced(1), quiet=0.01, timeout=None)
        await asyncio.sleep(0.05)
        due = await store.find_delayed_runs(utcnow(), 10)
        assert [r.run_id for r in due] == [first]
        [released] = await store.release_delayed_runs(due)
        assert released.status == "running" and released.not_before is None
        second, made = await store.debounce_run(debounced(2), quiet=30, timeout=None)
        assert made and second == debounce_run_id("wf", "k", 1)
        run = await store.get_run(first)
        assert run is not None and run.input == 1  # the released run keeps its input
        await store.set_run_status(second, "cancelled", expect=("queued",))
        third, made = await store.debounce_run(debounced(3), quiet=30, timeout=None)
        assert made and third not in (first, second)
        joined, made = await store.debounce_run(debounced(4), quiet=30, timeout=None)
        assert (joined, made) == (third, False)

    async def test_a_release_read_before_a_join_leaves_the_run(self, store: Store) -> None:
        """A release read before a join leaves the run."""
        run_id, _ = await store.debounce_run(debounced(1), quiet=0.01, timeout=None)
        await asyncio.sleep(0.05)
        due = await store.find_delayed_runs(utcnow(), 10)
        await store.debounce_run(debounced(2), quiet=30, timeout=None)  # moves it on
        assert await store.release_delayed_runs(due) == []
        run = await store.get_run(run_id)
        assert run is not None and run.status == "queued" and run.input == 2

    async def test_concurrent_debounced_starts_keep_one_pending_run(self, store: Store) -> None:
        """Concurrent debounced starts keep one pending run."""
        got = await asyncio.gather(
            *(store.debounce_run(debounced(i), quiet=30, timeout=None) for i in range(12))
        )
        assert len({run_id for run_id, _ in got}) == 1
        assert sum(made for _, made in got) == 1
        run = await store.get_run(got[0][0])
        assert run is not None and run.input in range(12)
        listed = await store.list_runs(workflow="wf", status=None, limit=50, after=None)
        assert [r.run_id for r in listed if r.status not in TERMINAL] == [run.run_id]
