"""Conformance cases for what operators read: runs listed by creation time."""

from __future__ import annotations

from datetime import timedelta

from engine_core.common.clock import utcnow
from engine_core.records import ScheduleRecord
from engine_core.store import Store
from engine_core.testing.builders import make_run


class OperatorCases:
    """What a store must do for lists of runs by creation time."""

    async def test_list_runs_newest_and_oldest_first(self, store: Store) -> None:
        """List runs newest and oldest first."""
        start = utcnow() - timedelta(minutes=5)
        # Ids against creation order, and two runs created at the same moment.
        made = {"z": 0, "m": 1, "a": 2, "b": 2, "k": 3, "c": 4}
        for run_id, second in made.items():
            run = make_run(run_id, workflow="odd" if run_id in "zak" else "even")
            run.created_at = start + timedelta(seconds=second)
            await store.insert_run(run)

        async def listed(order: str, **options: object) -> list[str]:
            options.setdefault("workflow", None)
            options.setdefault("status", None)
            options.setdefault("limit", 50)
            options.setdefault("after", None)
            runs = await store.list_runs(order=order, **options)  # type: ignore[arg-type]
            return [r.run_id for r in runs]

        assert await listed("newest") == ["c", "k", "b", "a", "m", "z"]
        assert await listed("oldest") == ["z", "m", "a", "b", "k", "c"]
        assert await listed("newest", limit=3) == ["c", "k", "b"]
        assert await listed("newest", after="b") == ["a", "m", "z"]
        assert await listed("oldest", after="a", limit=2) == ["b", "k"]
        assert await listed("newest", workflow="odd") == ["k", "a", "z"]
        assert await listed("oldest", status="failed") == []
        assert await listed("newest", created_since=start + timedelta(seconds=2)) == [
            "c",
            "k",
            "b",
            "a",
        ]
        two, three = start + timedelta(seconds=2), start + timedelta(seconds=3)
        assert await listed("newest", created_before=three, after="b") == ["a", "m", "z"]
        assert await listed("oldest", created_since=two, after="a") == ["b", "k", "c"]
        assert await listed("newest", created_since=two, created_before=three) == ["b", "a"]
        assert await listed("newest", after="gone") == []
        assert await listed("id", limit=2) == ["a", "b"]

    async def test_declared_queue_limits_are_stored(self, store: Store) -> None:
        """Declared queue limits are stored."""
        assert await store.list_queue_limits() == {}
        orders = {"concurrency": 5, "worker_concurrency": None, "key_concurrency": 1}
        await store.put_queue_limits("orders", {**orders, "rate": "100/60s"})
        none = dict.fromkeys(("concurrency", "worker_concurrency", "key_concurrency", "rate"))
        await store.put_queue_limits("a\x00b", none)
        await store.put_queue_limits("orders", {**orders, "rate": None})  # replaced
        fair = {**none, "key_rate": "10/60s", "fairness": "key"}
        await store.put_queue_limits("fair", fair)
        assert await store.list_queue_limits() == {
            "orders": {**orders, "rate": None},
            "a\x00b": none,
            "fair": fair,
        }

    async def test_a_schedule_keeps_its_catch_up(self, store: Store) -> None:
        """A schedule keeps its catch up."""
        now = utcnow().replace(microsecond=0)
        record = ScheduleRecord(
            "s", "w", None, 60.0, "UTC", None, True, now, now, now, catch_up="all"
        )
        await store.put_schedule(record)
        assert await store.get_schedule("s") == record
        assert [s.catch_up for s in await store.list_schedules()] == ["all"]
