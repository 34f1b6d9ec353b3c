"""Conformance cases for steps: guarded updates, claims, the scheduled scan."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from engine_core.common.clock import utcnow
from engine_core.records import AttemptEntry, StepGuard, StepPage
from engine_core.store import Store
from engine_core.testing.builders import claim_one, done_step, make_job


class StepCases:
    """What a store must do with steps and queue jobs."""

    # ---- steps ------------------------------------------------------------------

    async def test_insert_step_once(self, store: Store) -> None:
        """Insert step once."""
        job = make_job("run-1", "s")
        assert await store.insert_step(job)
        assert not await store.insert_step(make_job("run-1", "s", function="other"))
        got = await store.get_step("run-1", "s")
        assert got is not None and got.function == "fn" and got.payload == {"k": "s"}
        assert got.max_attempts == 3 and got.kind == "dispatch"
        assert await store.get_step("run-1", "nope") is None

    async def test_concurrent_inserts_of_one_step_make_one_row(self, store: Store) -> None:
        """Concurrent inserts of one step make one row."""
        results = await asyncio.gather(
            *(store.insert_step(make_job("run-1", "s", function=f"f{i}")) for i in range(10))
        )
        assert results.count(True) == 1
        assert len(await store.load_steps("run-1")) == 1

    async def test_concurrent_saves_of_one_step_make_one_row(self, store: Store) -> None:
        """Concurrent saves of one step make one row."""
        await asyncio.gather(*(store.save_steps([done_step("run-1", "s")]) for _ in range(10)))
        assert len(await store.load_steps("run-1")) == 1

    async def test_update_step_fences_by_attempt(self, store: Store) -> None:
        """Update step fences by attempt."""
        await store.insert_step(make_job("run-1", "s"))
        entry = AttemptEntry(attempt=2, status="succeeded", at=utcnow(), started_at=utcnow())
        assert await store.update_step(
            "run-1",
            "s",
            guard=StepGuard(attempts_below=2),
            changes={
                "status": "succeeded",
                "attempts": 2,
                "result": {"v": [1, "$a"]},
                "compensable": True,
            },
            entry=entry,
        )
        # A zombie of attempt 1 or a repeat of attempt 2 cannot overwrite it.
        for stale in (1, 2):
            assert not await store.update_step(
                "run-1",
                "s",
                guard=StepGuard(attempts_below=stale),
                changes={"status": "failed", "attempts": stale},
            )
        got = await store.get_step("run-1", "s")
        assert got is not None
        assert (got.status, got.attempts, got.result) == ("succeeded", 2, {"v": [1, "$a"]})
        assert got.compensable is True
        assert got.history[-1] == entry

    async def test_update_step_guards_and_history(self, store: Store) -> None:
        """Update step guards and history."""
        await store.insert_step(make_job("run-1", "s"))
        assert not await store.update_step(
            "run-1", "s", guard=StepGuard(status_in=("running",)), changes={"status": "failed"}
        )
        assert not await store.update_step(
            "run-1",
            "missing",
            guard=StepGuard(status_in=("scheduled",)),
            changes={"status": "failed"},
        )
        first = AttemptEntry(
            attempt=1, status="failed", at=utcnow(), error={"type": "E", "message": "m"}
        )
        second = AttemptEntry(attempt=2, status="succeeded", at=utcnow())
        assert await store.update_step(
            "run-1",
            "s",
            guard=StepGuard(status_in=("scheduled",)),
            changes={"status": "pending", "error": first.error},
            entry=first,
        )
        assert await store.update_step(
            "run-1",
            "s",
            guard=StepGuard(attempts=0),
            changes={"status": "succeeded", "result": None, "error": None},
            entry=second,
        )
        got = await store.get_step("run-1", "s")
        assert got is not None and got.history == [first, second] and got.error is None

    async def test_claim_takes_the_job_due_first(self, store: Store) -> None:
        """Claim takes the job due first."""
        await store.insert_step(make_job("r", "late", due_in=-1))
        await store.insert_step(make_job("r", "early", due_in=-5))
        await store.insert_step(make_job("r", "future", due_in=60))
        await store.insert_step(make_job("r", "other-fn", due_in=-9, function="other"))
        first = await claim_one(store, "fn", "w1", 30)
        second = await claim_one(store, "fn", "w1", 30)
        assert first is not None and second is not None
        assert (first.key, second.key) == ("early", "late")
        assert first.status == "running" and first.attempts == 1
        assert first.claim_holder == "w1" and first.claim_expires_at is not None
        assert await claim_one(store, "fn", "w1", 30) is None

    async def test_halted_jobs_are_not_claimed(self, store: Store) -> None:
        """Halted jobs are not claimed."""
        await store.insert_step(make_job("r", "s"))
        await store.halt_steps("r", True)
        assert await claim_one(store, "fn", "w", 30) is None
        await store.halt_steps("r", False)
        assert await claim_one(store, "fn", "w", 30) is not None

    async def test_a_batch_claim_takes_the_jobs_due_first(self, store: Store) -> None:
        """A batch claim takes the jobs due first."""
        for i in range(10):
            await store.insert_step(make_job("r", f"s{i}", due_in=-10 + i))
        await store.insert_step(make_job("r", "other", due_in=-20, function="other"))
        batch = await store.claim_steps(["fn"], holder="w", claim_ttl=30, limit=4)
        assert [j.key for j in batch] == ["s0", "s1", "s2", "s3"]
        assert all(j.status == "running" and j.attempts == 1 for j in batch)
        rest = await store.claim_steps(["fn", "other"], holder="w", claim_ttl=30, limit=100)
        assert sorted(j.key for j in rest) == ["other", *(f"s{i}" for i in range(4, 10))]
        assert await store.claim_steps(["fn"], holder="w", claim_ttl=30, limit=10) == []

    async def test_concurrent_batch_claims_one_winner_per_job(self, store: Store) -> None:
        """Concurrent batch claims one winner per job."""
        for i in range(40):
            await store.insert_step(make_job("r", f"s{i:02d}"))
        batches = await asyncio.gather(
            *(store.claim_steps(["fn"], holder=f"w{i}", claim_ttl=30, limit=7) for i in range(12))
        )
        won = [j.key for batch in batches for j in batch]
        assert len(won) == len(set(won))
        won += [j.key for j in await store.claim_steps(["fn"], holder="z", claim_ttl=30, limit=99)]
        assert sorted(won) == [f"s{i:02d}" for i in range(40)]

    async def test_concurrent_claims_one_winner_per_job(self, store: Store) -> None:
        """Concurrent claims one winner per job."""
        for i in range(20):
            await store.insert_step(make_job("r", f"s{i:02d}"))
        won: list[str] = []
        for _ in range(40):  # rounds of racing claimers, until every job is taken
            claims = await asyncio.gather(*(claim_one(store, "fn", f"w{i}", 30) for i in range(6)))
            won += [c.key for c in claims if c is not None]
            if len(won) >= 20:
                break
        assert sorted(won) == [f"s{i:02d}" for i in range(20)]

    async def test_a_holder_finds_its_claims(self, store: Store) -> None:
        """A holder finds its claims."""
        for i in range(3):
            await store.insert_step(make_job("r", f"s{i}"))
        mine = await store.claim_steps(["fn"], holder="me", claim_ttl=30, limit=2)
        await store.claim_steps(["fn"], holder="other", claim_ttl=30, limit=1)
        found = await store.find_claims("me")
        assert sorted(j.key for j in found) == sorted(j.key for j in mine)
        assert await store.find_claims("nobody") == []

    async def test_lapsed_claim_is_taken_back_as_a_new_attempt(self, store: Store) -> None:
        """Lapsed claim is taken back as a new attempt."""
        await store.insert_step(make_job("r", "s"))
        # Live for the two checks below: a shorter claim lapsed between them on a loaded
        # machine (two round trips can take 50 ms).
        first = await claim_one(store, "fn", "dead", 1.0)
        assert first is not None and first.attempts == 1
        assert await claim_one(store, "fn", "live", 30) is None
        assert await store.requeue_lapsed_claims() == 0  # still live
        await asyncio.sleep(1.1)
        assert await store.requeue_lapsed_claims() == 1
        assert await store.requeue_lapsed_claims() == 0
        second = await claim_one(store, "fn", "live", 30)
        assert second is not None and second.attempts == 2 and second.claim_holder == "live"
        # The dead worker's outcome is fenced out.
        assert not await store.update_step(
            "r",
            "s",
            guard=StepGuard(status_in=("running",), attempts=1, claim_holder="dead"),
            changes={"status": "succeeded"},
        )
        assert not await store.extend_claim("r", "s", holder="dead", attempt=1, claim_ttl=30)
        assert await store.extend_claim("r", "s", holder="live", attempt=2, claim_ttl=30)

    async def test_scheduled_steps_page_by_key(self, store: Store) -> None:
        """Scheduled steps page by key."""
        base = utcnow()
        for i in range(25):
            job = make_job(f"r{i % 3}", f"s{i:02d}")
            job.kind = "sleep"
            job.due_at = base + timedelta(seconds=i // 5)  # ties on due_at
            await store.insert_step(job)
        done = make_job("r0", "finished")
        done.status = "succeeded"
        await store.insert_step(done)
        seen: list[tuple[str, str]] = []
        after: StepPage | None = None
        while True:
            page = await store.find_scheduled_steps(4, after)
            seen.extend((s.run_id, s.key) for s in page)
            if len(page) < 4:
                break
            last = page[-1]
            assert last.due_at is not None
            after = StepPage(last.due_at, last.run_id, last.key)
        assert len(seen) == 25 and len(set(seen)) == 25
        assert ("r0", "finished") not in seen
