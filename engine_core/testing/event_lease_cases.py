"""Conformance cases for events and leases."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from engine_core.common.clock import REAL_CLOCK, utcnow
from engine_core.records import EventRecord, StepGuard
from engine_core.store import Store
from engine_core.testing.builders import begin, make_job, make_run


class EventLeaseCases:
    """What a store must do with events and leases."""

    # ---- events -----------------------------------------------------------------

    async def test_events_are_consumed_oldest_first_once(self, store: Store) -> None:
        """Events are consumed oldest first once."""
        now = utcnow()
        for i in range(3):
            await store.insert_event(EventRecord(f"e{i}", "r", "go", {"i": i}, now))
        await store.insert_event(EventRecord("x", "r", "other", 9, now))
        first = await store.consume_event("r", "go", "wait-a")
        again = await store.consume_event("r", "go", "wait-a")
        second = await store.consume_event("r", "go", "wait-b")
        assert first is not None and again is not None and second is not None
        assert first.payload == {"i": 0} and again.event_id == first.event_id
        assert second.payload == {"i": 1}
        assert (await store.consume_event("r", "go", "wait-c")) is not None
        assert await store.consume_event("r", "go", "wait-d") is None
        assert await store.consume_event("r", "other", "wait-e") is not None

    async def test_concurrent_consumers_never_share_an_event(self, store: Store) -> None:
        """Concurrent consumers never share an event."""
        now = utcnow()
        for i in range(5):
            await store.insert_event(EventRecord(f"e{i}", "r", "go", i, now))
        got = await asyncio.gather(*(store.consume_event("r", "go", f"c{i}") for i in range(12)))
        taken = [g.event_id for g in got if g is not None]
        assert sorted(taken) == [f"e{i}" for i in range(5)]

    # ---- leases -----------------------------------------------------------------

    async def test_lease_acquire_refresh_release(self, store: Store) -> None:
        """Lease acquire refresh release."""
        lease = await store.acquire_lease("k", "a", 30)
        assert lease is not None and lease.holder == "a"
        assert await store.acquire_lease("k", "b", 30) is None
        renewed = await store.refresh_lease(lease, 60)
        assert renewed is not None and renewed.token == lease.token
        assert renewed.expires_at >= lease.expires_at
        await store.release_lease(lease)
        again = await store.acquire_lease("k", "b", 30)
        assert again is not None and again.token == lease.token + 1
        assert await store.refresh_lease(lease, 30) is None
        await store.release_lease(lease)  # a stale release changes nothing
        assert await store.acquire_lease("k", "c", 30) is None

    async def test_expired_lease_is_taken_over_with_a_new_token(self, store: Store) -> None:
        """Expired lease is taken over with a new token."""
        first = await store.acquire_lease("k", "a", 0.05)
        assert first is not None
        await asyncio.sleep(0.1)
        assert await store.refresh_lease(first, 30) is None
        second = await store.acquire_lease("k", "b", 30)
        assert second is not None and second.token == first.token + 1
        await store.release_lease(first)  # the old holder cannot release the new lease
        assert await store.acquire_lease("k", "c", 30) is None

    async def test_concurrent_acquires_one_winner(self, store: Store) -> None:
        """Concurrent acquires one winner."""
        got = await asyncio.gather(*(store.acquire_lease("k", f"h{i}", 30) for i in range(20)))
        assert sum(1 for g in got if g is not None) == 1
        other = await store.acquire_lease("other-key", "h", 30)
        assert other is not None

    async def test_open_pass_is_set_by_begin_and_cleared_by_settle(self, store: Store) -> None:
        """Open pass is set by begin and cleared by settle."""
        await store.insert_run(make_run())
        later = utcnow() + timedelta(seconds=5)
        assert await store.find_idle_runs(later, 10, in_flight_only=True) == []
        token = await begin(store)
        opened = await store.find_idle_runs(later, 10, in_flight_only=True)
        assert [r.run_id for r in opened] == ["run-1"] and opened[0].open_pass
        assert await store.settle_run("run-1", token=token, expect=("running",))
        assert await store.find_idle_runs(later, 10, in_flight_only=True) == []
        got = await store.get_run("run-1")
        assert got is not None and got.open_pass is False

    async def test_unnotified_steps_are_found(self, store: Store) -> None:
        """Unnotified steps are found."""
        await store.insert_step(make_job("r", "told"))
        await store.insert_step(make_job("r", "untold"))
        assert await store.update_step(
            "r",
            "untold",
            guard=StepGuard(status_in=("scheduled",)),
            changes={"status": "succeeded", "notified": False, "updated_at": utcnow()},
        )
        later = utcnow() + timedelta(seconds=5)
        found = await store.find_unnotified_steps(later, 10)
        assert [(s.run_id, s.key, s.notified) for s in found] == [("r", "untold", False)]
        assert await store.find_unnotified_steps(utcnow() - timedelta(seconds=60), 10) == []
        await store.update_step("r", "untold", guard=StepGuard(), changes={"notified": True})
        assert await store.find_unnotified_steps(later, 10) == []

    # ---- the clock --------------------------------------------------------------

    async def test_a_store_follows_the_real_clock_it_is_handed(self, store: Store) -> None:
        """Every store follows the real clock (``Engine(store)`` hands it down, once per
        engine): the leases it times itself are real times."""
        store.follow_clock(REAL_CLOCK)
        store.follow_clock(REAL_CLOCK)  # a second engine on the store: the same clock
        await store.insert_run(make_run())
        before = utcnow()
        begun = await store.begin_pass("run-1", holder="a", ttl=30)
        after = utcnow()
        assert begun is not None and begun.lease_expires_at is not None
        slack = timedelta(seconds=1)
        ttl = timedelta(seconds=30)
        assert before + ttl - slack <= begun.lease_expires_at <= after + ttl + slack
