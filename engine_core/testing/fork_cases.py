"""Conformance cases for forks (``Store.fork_run``, ``list_forks``, ``clean_forks``)."""

from __future__ import annotations

from datetime import timedelta

from engine_core.common.clock import utcnow
from engine_core.errors import DuplicateRunError
from engine_core.records import AttemptEntry, StepRecord
from engine_core.store import Store
from engine_core.testing.builders import make_job, make_run


def _copied(run_id: str, key: str, order: int) -> StepRecord:
    now = utcnow()
    return StepRecord(
        run_id=run_id,
        key=key,
        kind="inline",
        status="succeeded",
        attempts=1,
        result={"key": key, "nul": "a\x00b"},
        updated_at=now,
        ended_at=now,
        history=[AttemptEntry(1, "succeeded", now, started_at=now)],
        order=order,
        ran="m:f",
    )


class ForkCases:
    """What a store must do to make a fork whole or not at all."""

    async def test_fork_run_writes_the_run_and_its_steps(self, store: Store) -> None:
        """Fork run writes the run and its steps."""
        await store.insert_run(make_run("orig", status="failed"))
        fork = make_run("fork", forked_from={"run_id": "orig", "step": "charge"})
        steps = [_copied("fork", f"s{i}", i) for i in range(3)]
        assert await store.fork_run(fork, steps) is None
        got = await store.get_run("fork")
        assert got is not None and got.forked_from == {"run_id": "orig", "step": "charge"}
        loaded = sorted(await store.load_steps("fork"), key=lambda s: s.key)
        assert [s.key for s in loaded] == ["s0", "s1", "s2"]
        assert loaded[0].result == {"key": "s0", "nul": "a\x00b"} and loaded[2].order == 2
        # Repeated (a lost reply): the same run, no second fork, the steps as they were.
        again = await store.fork_run(fork, steps)
        assert again is not None and again.run_id == "fork"
        assert len(await store.load_steps("fork")) == 3
        assert await store.list_forks("orig", limit=10) == ["fork"]
        assert await store.list_forks("fork", limit=10) == []
        original = await store.get_run("orig")
        assert original is not None and original.forked_from is None

    async def test_list_forks_oldest_first_and_bounded(self, store: Store) -> None:
        """List forks oldest first and bounded."""
        await store.insert_run(make_run("orig"))
        start = utcnow() - timedelta(minutes=1)
        for i, fork_id in enumerate(["z", "a", "m"]):
            fork = make_run(fork_id, forked_from={"run_id": "orig", "step": ""})
            fork.created_at = start + timedelta(seconds=i)
            await store.fork_run(fork, [])
        await store.insert_run(make_run("other", forked_from={"run_id": "x", "step": ""}))
        assert await store.list_forks("orig", limit=10) == ["z", "a", "m"]
        assert await store.list_forks("orig", limit=2) == ["z", "a"]

    async def test_a_fork_on_a_held_dedup_id_writes_nothing(self, store: Store) -> None:
        """A fork on a held dedup id writes nothing."""
        await store.insert_run(make_run("live", dedup_id="order-1"))
        fork = make_run("fork", dedup_id="order-1", forked_from={"run_id": "live", "step": ""})
        try:  # (not pytest.raises: importing the suite imports no pytest)
            await store.fork_run(fork, [_copied("fork", "a", 0)])
        except DuplicateRunError:
            pass
        else:
            raise AssertionError("a fork on a held dedup id raised no DuplicateRunError")
        assert await store.get_run("fork") is None
        # What it may have written is invisible, and cleaned up.
        await store.clean_forks(utcnow() + timedelta(hours=2))
        assert await store.load_steps("fork") == []

    async def test_clean_forks_spares_whole_forks(self, store: Store) -> None:
        """Clean forks spares whole forks."""
        await store.insert_run(make_run("orig"))
        fork = make_run("fork", forked_from={"run_id": "orig", "step": "b"})
        await store.fork_run(fork, [_copied("fork", "a", 0)])
        assert await store.clean_forks(utcnow() + timedelta(hours=2)) == 0
        assert [s.key for s in await store.load_steps("fork")] == ["a"]

    async def test_a_forks_job_keeps_the_run_whose_keys_it_uses(self, store: Store) -> None:
        # A worker elsewhere claims the job and reads the idempotency keys' run from it.
        assert await store.insert_step(make_job("fork", "notify", idempotency_of="orig"))
        got = await store.get_step("fork", "notify")
        assert got is not None and got.idempotency_of == "orig"
        (claimed,) = await store.claim_steps(["fn"], holder="w1", claim_ttl=30, limit=5)
        assert claimed.idempotency_of == "orig"
