"""Conformance cases for flow control: queue state, the line, dedup, delays, deadlines."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta
from typing import Any

from engine_core.common.clock import utcnow
from engine_core.errors import DuplicateRunError
from engine_core.records import LinePage, QueueState, RunRecord
from engine_core.store import Store
from engine_core.testing.builders import begin, make_run


def queued(run_id: str, queue: str | None = "q", **extra: Any) -> RunRecord:
    """A run as ``engine.start`` records one that waits (on ``queue``, or a delay)."""
    return make_run(run_id, status="queued", pending_pass=False, queue=queue, **extra)


async def admit(store: Store, *run_ids: str) -> int:
    """``store.admit_runs`` of the runs with these ids that exist, as stored."""
    return await store.admit_runs(await store.get_runs(run_ids))


class FlowCases:
    """What a store must do for queues, dedup ids, delayed starts and deadlines."""

    async def test_queue_state_round_trips_and_is_replaced_by_compare_and_set(
        self, store: Store
    ) -> None:
        """Queue state round trips and is replaced by compare and set."""
        assert await store.get_queue_state("q") is None
        now = utcnow()
        first = QueueState(
            "q", version=1, held=7, reserved=["a", "b"], window=[(now, 3)], legacy={"x": "k"}
        )
        assert await store.save_queue_state(first, expect_version=0)
        assert not await store.save_queue_state(first, expect_version=0)
        got = await store.get_queue_state("q")
        assert got is not None
        assert (got.version, got.held, got.reserved, got.window, got.legacy) == (
            1, 7, ["a", "b"], [(now, 3)], {"x": "k"},
        )  # fmt: skip
        second = QueueState("q", version=2, minutes=[(5, 3)])
        assert not await store.save_queue_state(second, expect_version=7)
        assert await store.save_queue_state(second, expect_version=1)
        got = await store.get_queue_state("q")
        assert got is not None and got.version == 2 and got.reserved == []
        assert got.minutes == [(5, 3)] and got.legacy == {} and got.window == []
        assert await store.get_queue_state("other") is None

    async def test_racing_queue_state_savers_land_once(self, store: Store) -> None:
        """Racing queue state savers land once."""
        await store.save_queue_state(QueueState("q", version=1), expect_version=0)
        results = await asyncio.gather(
            *(
                store.save_queue_state(
                    QueueState("q", version=2, reserved=[f"r{i}"]), expect_version=1
                )
                for i in range(10)
            )
        )
        assert sum(results) == 1
        got = await store.get_queue_state("q")
        assert got is not None and len(got.reserved) == 1

    async def test_the_line_is_in_priority_then_start_order_per_queue(self, store: Store) -> None:
        """The line is in priority then start order per queue."""
        base = utcnow()
        specs = [("a", 5, 0), ("b", 0, 1), ("c", 5, 2), ("d", -1, 3), ("e", 0, 4)]
        for run_id, priority, second in specs:
            at = base + timedelta(seconds=second)
            await store.insert_run(queued(run_id, priority=priority, created_at=at, updated_at=at))
        await store.insert_run(queued("other", queue="q2"))
        await store.insert_run(queued("q-ext", queue="q\x00x"))
        await store.insert_run(queued("later", not_before=base + timedelta(hours=1)))
        await store.insert_run(make_run("plain"))
        line = await store.queued_runs("q", limit=10)
        assert [r.run_id for r in line] == ["d", "b", "e", "a", "c"]
        first = line[1]
        page = LinePage(first.priority, first.created_at, first.run_id)
        assert [r.run_id for r in await store.queued_runs("q", limit=2, after=page)] == ["e", "a"]
        assert [r.run_id for r in await store.queued_runs("q2", limit=10)] == ["other"]
        assert [r.run_id for r in await store.queued_runs("nope", limit=10)] == []

    async def test_admit_moves_only_runs_waiting_in_line(self, store: Store) -> None:
        """Admit moves only runs waiting in line."""
        await store.insert_run(queued("a"))
        await store.insert_run(queued("b"))
        await store.insert_run(queued("late", not_before=utcnow() + timedelta(hours=1)))
        await store.insert_run(make_run("running"))
        assert await admit(store, "a", "late", "running", "missing") == 1
        assert await admit(store, "a") == 0  # admitting twice is a no-op
        a = await store.get_run("a")
        assert a is not None and a.status == "running" and a.pending_pass
        assert [r.run_id for r in await store.queued_runs("q", limit=10)] == ["b"]
        late = await store.get_run("late")
        assert late is not None and late.status == "queued"

    async def test_admitting_a_run_holding_its_lease_begins_its_first_pass(
        self, store: Store
    ) -> None:
        """Admitting a run holding its lease begins its first pass."""
        await store.insert_run(queued("a", input={"x": 1}))
        await store.insert_run(queued("b"))
        [a, b] = await store.queued_runs("q", limit=10)
        begun = await store.admit_run_holding(a, holder="h", ttl=30)
        assert begun is not None and begun.input == {"x": 1}
        assert (begun.status, begun.token, begun.passes, begun.lease_holder) == (
            "running", 1, 1, "h",
        )  # fmt: skip
        assert begun.open_pass and not begun.pending_pass
        stored = await store.get_run("a")
        assert stored is not None and stored.status == "running" and stored.token == 1
        assert stored.lease_expires_at is not None and stored.lease_expires_at > utcnow()
        assert await store.begin_pass("a", holder="other", ttl=30) is None  # held
        assert await store.admit_run_holding(a, holder="h", ttl=30) is None  # not queued
        # A run whose token moved on since it was read is not admitted by this call.
        await store.begin_pass("b", holder="x", ttl=0)
        assert await store.admit_run_holding(b, holder="h", ttl=30) is None
        assert [r.run_id for r in await store.queued_runs("q", limit=10)] == ["b"]

    async def test_a_cancelled_queued_run_leaves_the_line(self, store: Store) -> None:
        """A cancelled queued run leaves the line."""
        await store.insert_run(queued("a"))
        await store.set_run_status("a", "cancelled", expect=("queued",))
        assert await store.queued_runs("q", limit=10) == []
        assert await admit(store, "a") == 0

    async def test_delayed_runs_are_found_in_time_order_and_released(self, store: Store) -> None:
        """Delayed runs are found in time order and released."""
        now = utcnow()
        await store.insert_run(queued("q-later", not_before=now + timedelta(seconds=2)))
        await store.insert_run(queued("q-soon", not_before=now + timedelta(seconds=1)))
        await store.insert_run(queued("bare", queue=None, not_before=now + timedelta(seconds=1.5)))
        await store.insert_run(queued("far", not_before=now + timedelta(days=3)))
        found = await store.find_delayed_runs(now + timedelta(seconds=10), 10)
        assert [r.run_id for r in found] == ["q-soon", "bare", "q-later"]
        assert [r.run_id for r in await store.find_delayed_runs(now, 10)] == []
        soon_and_bare = found[:2]
        missing = queued("missing", not_before=now)
        released = await store.release_delayed_runs([*soon_and_bare, missing])
        assert sorted(r.run_id for r in released) == ["bare", "q-soon"]
        assert await store.release_delayed_runs(soon_and_bare[:1]) == []
        bare = await store.get_run("bare")
        assert bare is not None and bare.status == "running" and bare.pending_pass
        assert bare.not_before is None
        soon = await store.get_run("q-soon")
        assert soon is not None and soon.status == "queued" and soon.not_before is None
        assert [r.run_id for r in await store.queued_runs("q", limit=10)] == ["q-soon"]
        found = await store.find_delayed_runs(now + timedelta(seconds=10), 10)
        assert [r.run_id for r in found] == ["q-later"]

    async def test_deadlines_of_runs_not_ended_are_found_in_time_order(self, store: Store) -> None:
        """Deadlines of runs not ended are found in time order."""
        now = utcnow()
        await store.insert_run(make_run("two", deadline_at=now + timedelta(seconds=2)))
        await store.insert_run(make_run("one", deadline_at=now + timedelta(seconds=1)))
        await store.insert_run(queued("waiting", deadline_at=now + timedelta(seconds=3)))
        await store.insert_run(make_run("none"))
        found = await store.find_deadlines(now + timedelta(seconds=10), 10)
        assert [r.run_id for r in found] == ["one", "two", "waiting"]
        assert found[0].deadline_at == now + timedelta(seconds=1)
        token = await begin(store, "one")
        await store.settle_run("one", token=token, expect=("running",), status="completed")
        await store.set_run_status("waiting", "cancelled", expect=("queued",))
        found = await store.find_deadlines(now + timedelta(seconds=10), 10)
        assert [r.run_id for r in found] == ["two"]
        ended = await store.get_run("one")
        assert ended is not None and ended.deadline_at == now + timedelta(seconds=1)

    async def test_a_dedup_id_is_held_until_its_run_ends(self, store: Store) -> None:
        """A dedup id is held until its run ends."""
        await store.insert_run(queued("a", dedup_id="d"))
        try:
            await store.insert_run(queued("b", dedup_id="d"))
        except DuplicateRunError as exc:
            assert exc.run_id == "a"
        else:
            raise AssertionError("a second run took a dedup id that was held")
        assert await store.get_run("b") is None
        # The same run id is an idempotent insert, not a duplicate.
        existing = await store.insert_run(queued("a", dedup_id="d"))
        assert existing is not None and existing.run_id == "a"
        # Another queue (or none) is another namespace.
        assert await store.insert_run(queued("c", queue="q2", dedup_id="d")) is None
        assert await store.insert_run(queued("e", queue=None, dedup_id="d")) is None
        await store.set_run_status("a", "cancelled", expect=("queued",))
        assert await store.insert_run(queued("b", dedup_id="d")) is None
        await admit(store, "b")
        token = await begin(store, "b")
        await store.settle_run("b", token=token, expect=("running",), status="failed")
        assert await store.insert_run(queued("f", dedup_id="d")) is None
        got = await store.get_run("f")
        assert got is not None and got.dedup_id == "d"

    async def test_racing_inserts_holding_one_dedup_id_land_once(self, store: Store) -> None:
        """Racing inserts holding one dedup id land once."""

        async def insert(i: int) -> str:
            try:
                await store.insert_run(queued(f"r{i}", dedup_id="once"))
                return f"r{i}"
            except DuplicateRunError as exc:
                return "dup:" + exc.run_id

        got = await asyncio.gather(*(insert(i) for i in range(10)))
        winners = [g for g in got if not g.startswith("dup:")]
        assert len(winners) == 1
        assert all(g in (winners[0], "dup:" + winners[0]) for g in got)

    async def test_queue_counts_and_names(self, store: Store) -> None:
        """Queue counts and names."""
        await store.insert_run(queued("a"))
        await store.insert_run(queued("b", not_before=utcnow() + timedelta(hours=1)))
        await store.insert_run(queued("c"))
        await store.insert_run(queued("x", queue="q2"))
        await admit(store, "c")
        await store.set_run_status("x", "cancelled", expect=("queued",))
        assert await store.count_queue("q") == {"queued": 2, "running": 1}
        assert await store.count_queue("q2") == {}
        assert await store.queue_names() == ["q"]
        await store.save_queue_state(QueueState("q3", version=1), expect_version=0)
        assert await store.queue_names() == ["q", "q3"]
        got = await store.get_run("a")
        assert got is not None and (got.queue, got.priority) == ("q", 0)

    async def _failed_run(self, store: Store, run_id: str, **extra: Any) -> RunRecord:
        await store.insert_run(queued(run_id, **extra))
        if extra.get("queue", "q") is not None:
            assert await admit(store, run_id) == 1
        else:
            await store.set_run_status(run_id, "running", expect=("queued",))
        token = await begin(store, run_id)
        await store.settle_run(run_id, token=token, expect=("running",), status="failed")
        failed = await store.get_run(run_id)
        assert failed is not None and failed.status == "failed"
        return failed

    async def test_a_failed_run_reenters_its_queue_dedup_id_and_deadline(
        self, store: Store
    ) -> None:
        """A failed run reenters its queue dedup id and deadline."""
        now = utcnow()
        due = now + timedelta(seconds=5)
        failed = await self._failed_run(
            store, "a", dedup_id="d", deadline_at=now + timedelta(seconds=1), deadline_s=1.0
        )
        # Its flow-control fields are kept on the ended run; what only a live run holds
        # is given up.
        assert (failed.queue, failed.dedup_id, failed.deadline_s) == ("q", "d", 1.0)
        assert await store.dedup_holder("q", "d") is None
        assert await store.find_deadlines(now + timedelta(hours=1), 10) == []
        back = replace(failed, status="queued", pending_pass=False, deadline_at=due)
        got = await store.reenter_run(back, expect=("failed",))
        assert got is not None and (got.status, got.pending_pass) == ("queued", False)
        assert (got.deadline_at, got.deadline_s, got.dedup_id) == (due, 1.0, "d")
        assert [r.run_id for r in await store.queued_runs("q", limit=10)] == ["a"]
        assert await store.dedup_holder("q", "d") == "a"
        assert [r.run_id for r in await store.find_deadlines(due + timedelta(1), 10)] == ["a"]
        try:
            await store.insert_run(queued("b", dedup_id="d"))
        except DuplicateRunError as exc:
            assert exc.run_id == "a"
        else:
            raise AssertionError("a start took the dedup id of a run that went live again")
        assert await store.reenter_run(back, expect=("failed",)) is None  # not failed now
        assert await admit(store, "a") == 1

    async def test_a_run_off_any_queue_reenters_running_and_owed_a_pass(self, store: Store) -> None:
        """A run off any queue reenters running and owed a pass."""
        failed = await self._failed_run(store, "a", queue=None)
        back = replace(failed, status="running", pending_pass=True)
        got = await store.reenter_run(back, expect=("failed",))
        assert got is not None and (got.status, got.pending_pass) == ("running", True)
        assert got.deadline_at is None and await store.queued_runs("q", limit=10) == []

    async def test_a_reentry_whose_dedup_id_is_held_writes_nothing(self, store: Store) -> None:
        """A reentry whose dedup id is held writes nothing."""
        now = utcnow()
        failed = await self._failed_run(store, "a", dedup_id="d", deadline_s=1.0)
        await store.insert_run(queued("b", dedup_id="d"))
        due = now + timedelta(seconds=5)
        back = replace(failed, status="queued", pending_pass=False, deadline_at=due)
        try:
            await store.reenter_run(back, expect=("failed",))
        except DuplicateRunError as exc:
            assert exc.run_id == "b"
        else:
            raise AssertionError("a run went live again holding a dedup id another holds")
        got = await store.get_run("a")
        assert got is not None and got.status == "failed" and got.deadline_at is None
        assert [r.run_id for r in await store.queued_runs("q", limit=10)] == ["b"]
        assert await store.dedup_holder("q", "d") == "b"
        assert await store.find_deadlines(due + timedelta(1), 10) == []

    async def test_admitted_runs_are_counted_per_queue_and_per_key(self, store: Store) -> None:
        """Admitted runs are counted per queue and per key."""
        for run_id, key in [("a", "k1"), ("b", "k1"), ("c", "k2"), ("d", None), ("e", "k1")]:
            await store.insert_run(queued(run_id, queue_key=key))
        await store.insert_run(queued("x", queue="q\x00x", queue_key="k1"))
        await store.insert_run(queued("y", queue="q2", queue_key="k1"))
        assert await store.count_admitted("q") == 0
        assert await admit(store, "a", "b", "d", "x", "y") == 5
        [c] = await store.get_runs(["c"])
        assert await store.admit_run_holding(c, holder="h", ttl=30) is not None
        assert await store.count_admitted("q") == 4  # e waits in the line
        assert await store.count_admitted("q2") == 1
        counts = await store.count_admitted_keys("q", ["k1", "k2", None, "k9"])
        assert counts == {"k1": 2, "k2": 1, None: 1}
        assert await store.count_admitted_keys("q", []) == {}
        # A suspended run still holds its slot; an ended one does not.
        await store.set_run_status("b", "suspended", expect=("running",))
        await store.set_run_status("a", "cancelled", expect=("running",))
        token = await begin(store, "d")
        await store.settle_run("d", token=token, expect=("running",), status="completed")
        assert await store.count_admitted("q") == 2
        assert await store.count_admitted_keys("q", ["k1", None]) == {"k1": 1}
