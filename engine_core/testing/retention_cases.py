"""Conformance cases for retention: an ended run's ``expire_at``, and ``expire_runs``
deleting it with everything it owns, never a run that has not ended."""

from __future__ import annotations

from datetime import timedelta

from engine_core.common.clock import utcnow
from engine_core.records import EventRecord, UpdateRecord
from engine_core.store import Store
from engine_core.streams import StreamEntry
from engine_core.testing.builders import begin, make_job, make_run


async def _owning(store: Store, run_id: str) -> None:
    """Insert run ``run_id`` with a step, an event, a stream entry, a heartbeat, a
    published value and an update."""
    await store.insert_run(make_run(run_id))
    await store.insert_step(make_job(run_id, "s"))
    await store.insert_event(EventRecord(f"{run_id}-e", run_id, "ev", {"v": 1}, utcnow()))
    await store.append_stream(StreamEntry(run_id, "log", 0, "line", utcnow()))
    await store.put_heartbeat(run_id, "s", attempt=1, details={"at": 1})
    now = utcnow()
    await store.put_value(run_id, "k", 1, branch="", position=0, written_at=now)
    await store.submit_update(UpdateRecord(run_id, f"{run_id}-u", "ask", 2, now, seq="1"))


async def _owns_nothing(store: Store, run_id: str) -> bool:
    return (
        await store.get_run(run_id) is None
        and await store.load_steps(run_id) == []
        and await store.consume_event(run_id, "ev", "probe") is None
        and await store.stream_length(run_id, "log") == 0
        and await store.get_heartbeat(run_id, "s") is None
        and await store.list_values(run_id) == []
        and await store.list_updates(run_id, pending=False) == []
    )


async def _expire_all(store: Store, limit: int = 100) -> int:
    """``expire_runs`` until it finds nothing more (a store that stamps for its storage's
    own deletion makes its runs ready in the first calls)."""
    total = 0
    for _ in range(10):
        done = await store.expire_runs(utcnow(), limit)
        total += done
        if done == 0:
            break
    return total


class RetentionCases:
    """What a store must do for retention (``docs/guides/data-at-rest.md``)."""

    async def test_the_write_that_ends_a_run_sets_when_it_expires(self, store: Store) -> None:
        """The write that ends a run sets when it expires."""
        at = utcnow().replace(microsecond=0) + timedelta(days=30)
        await store.insert_run(make_run("settled", retention=30 * 86400.0))
        token = await begin(store, "settled")
        parked = await store.settle_run(
            "settled", token=token, expect=("running",), status=None, expire_at=at
        )
        assert parked
        run = await store.get_run("settled")
        assert run is not None and run.expire_at is None and run.retention == 30 * 86400.0
        token = await begin(store, "settled")
        assert await store.settle_run(
            "settled", token=token, expect=("running",), status="completed", expire_at=at
        )
        run = await store.get_run("settled")
        assert run is not None and run.expire_at == at
        await store.insert_run(make_run("cancelled"))
        stopped = await store.set_run_status(
            "cancelled", "cancelled", expect=("running",), expire_at=at
        )
        assert stopped is not None and stopped.expire_at == at
        await store.insert_run(make_run("suspended"))
        paused = await store.set_run_status(
            "suspended", "suspended", expect=("running",), expire_at=at
        )
        assert paused is not None and paused.expire_at is None  # not ended: never expires

    async def test_an_expired_run_goes_with_everything_it_owns(self, store: Store) -> None:
        """An expired run goes with everything it owns; others stay."""
        past, future = utcnow() - timedelta(seconds=1), utcnow() + timedelta(hours=1)
        for run_id in ("expired", "later", "live", "kept"):
            await _owning(store, run_id)
        await store.set_run_status("expired", "completed", expect=("running",), expire_at=past)
        await store.set_run_status("later", "failed", expect=("running",), expire_at=future)
        await store.set_run_status("kept", "completed", expect=("running",))
        assert await _expire_all(store) >= 1
        assert await _owns_nothing(store, "expired")
        for run_id in ("later", "live", "kept"):
            assert await store.get_run(run_id) is not None, run_id
            assert len(await store.load_steps(run_id)) == 1, run_id
            assert await store.stream_length(run_id, "log") == 1, run_id
            assert await store.get_heartbeat(run_id, "s") is not None, run_id

    async def test_a_run_that_has_not_ended_never_expires(self, store: Store) -> None:
        """A run that has not ended never expires, even one retried after it expired."""
        past = utcnow() - timedelta(seconds=1)
        await _owning(store, "retried")
        await store.set_run_status("retried", "failed", expect=("running",), expire_at=past)
        failed = await store.get_run("retried")
        assert failed is not None and failed.expire_at == past
        failed.status = "running"
        back = await store.reenter_run(failed, expect=("failed",))
        assert back is not None and back.expire_at is None
        await store.insert_run(make_run("running", expire_at=past))  # not ended: ignored
        await _expire_all(store)
        assert await store.get_run("running") is not None
        retried = await store.get_run("retried")
        assert retried is not None and retried.expire_at is None
        assert len(await store.load_steps("retried")) == 1
        assert await store.stream_length("retried", "log") == 1

    async def test_expire_runs_is_bounded(self, store: Store) -> None:
        """Expire runs deletes at most ``limit`` a call, the earliest due first."""
        now = utcnow()
        for i in range(3):
            await store.insert_run(make_run(f"due-{i}"))
            at = now - timedelta(seconds=10 - i)
            await store.set_run_status(f"due-{i}", "completed", expect=("running",), expire_at=at)
        assert await store.expire_runs(now, 0) == 0
        assert await store.expire_runs(utcnow(), 2) == 2
        assert await store.get_run("due-0") is None and await store.get_run("due-1") is None
        assert await store.get_run("due-2") is not None
        await _expire_all(store, limit=2)
        for i in range(3):
            assert await store.get_run(f"due-{i}") is None
