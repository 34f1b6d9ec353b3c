"""Conformance cases for values and updates (docs/guides/values-and-updates.md)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

from engine_core.records import UpdateRecord, utcnow
from engine_core.store import Store
from engine_core.testing.builders import begin, make_run


def update(update_id: str, n: int = 0, *, name: str = "ask", run_id: str = "run-1") -> UpdateRecord:
    """An update of run-1 sent ``n`` seconds after a fixed start (its ``seq`` says so)."""
    at = utcnow().replace(microsecond=0) + timedelta(seconds=n)
    return UpdateRecord(run_id, update_id, name, {"n": n, "$set": "inert"}, at, seq=f"{n:06d}")


async def _hinted(hints: AsyncIterator[Any] | None, poke: Callable[[], Awaitable[Any]]) -> Any:
    """What ``hints`` yields first (past a "" that says it watches) while ``poke`` writes
    again and again; None when the store has no hints or they ended (a server without
    change streams)."""
    if hints is None:
        return None

    async def first() -> Any:
        async for hint in hints:
            if hint != "":
                return hint
        return None

    found = asyncio.ensure_future(first())
    try:
        async with asyncio.timeout(10):
            while not found.done():
                await poke()
                await asyncio.wait([found], timeout=0.05)
        return found.result()
    finally:
        found.cancel()
        with contextlib.suppress(BaseException):
            await found
        with contextlib.suppress(BaseException):
            await hints.aclose()  # type: ignore[attr-defined]


class TalkCases:
    """What a store must do with values and updates."""

    # ---- values -------------------------------------------------------------------

    async def test_a_value_keeps_its_latest_write_per_branch_position(self, store: Store) -> None:
        """A value keeps its latest write; a branch's write at or before its mark is refused."""
        at = utcnow().replace(microsecond=123456)
        assert await store.get_value("run-1", "stage") is None
        put = store.put_value
        assert await put("run-1", "stage", {"$set": "a"}, branch="", position=0, written_at=at)
        assert await put("run-1", "stage", "b", branch="", position=1, written_at=at)
        assert not await put("run-1", "stage", "again", branch="", position=1, written_at=at)
        assert not await put("run-1", "stage", "late", branch="", position=0, written_at=at)
        got = await store.get_value("run-1", "stage")
        assert got is not None and got.value == "b" and got.written_at == at
        assert await put("run-1", "stage", [1], branch="1.0", position=0, written_at=at)
        got = await store.get_value("run-1", "stage")
        assert got is not None and got.value == [1] and got.marks == {"": 1, "1.0": 0}
        assert not await put("run-1", "stage", "x", branch="1.0", position=0, written_at=at)

    async def test_values_are_kept_apart_by_run_and_key(self, store: Store) -> None:
        """Values are kept apart by run and key, and listed by key."""
        at = utcnow()
        for run_id, key, value in (
            ("run-1", "b", 1),
            ("run-1", "a.b", {"$x": 2}),
            ("run-10", "b", 3),
        ):
            assert await store.put_value(run_id, key, value, branch="", position=0, written_at=at)
        listed = await store.list_values("run-1")
        assert [(v.key, v.value) for v in listed] == [("a.b", {"$x": 2}), ("b", 1)]
        assert (await store.get_value("run-10", "b")).value == 3  # type: ignore[union-attr]
        assert await store.list_values("nothing") == []

    async def test_a_write_touches_its_own_key_only(self, store: Store) -> None:
        """A write of one key never lands on another key's value (whatever its marks)."""
        at = utcnow()
        assert await store.put_value("run-1", "a", 1, branch="1", position=4, written_at=at)
        assert await store.put_value("run-1", "b", 2, branch="", position=0, written_at=at)
        assert await store.put_value("run-2", "a", 3, branch="", position=0, written_at=at)
        got = {(v.run_id, v.key): (v.value, v.marks) for v in await store.list_values("run-1")}
        assert got == {("run-1", "a"): (1, {"1": 4}), ("run-1", "b"): (2, {"": 0})}

    async def test_racing_writes_of_one_position_land_once(self, store: Store) -> None:
        """Racing writes of one branch position: exactly one lands."""
        at = utcnow()
        landed = await asyncio.gather(
            *(
                store.put_value("run-1", "k", i, branch="", position=3, written_at=at)
                for i in range(8)
            )
        )
        assert sum(landed) == 1
        got = await store.get_value("run-1", "k")
        assert got is not None and got.value == landed.index(True)

    async def test_value_hints_name_the_run_or_end(self, store: Store) -> None:
        """Value hints yield the run a value was written for (or end: no hints)."""
        count = iter(range(10_000))

        async def poke() -> None:
            n = next(count)
            await store.put_value("run-7", "k", n, branch="", position=n, written_at=utcnow())

        assert await _hinted(store.value_hints(), poke) in (None, "run-7")

    # ---- updates ------------------------------------------------------------------

    async def test_an_update_is_kept_once_for_an_active_run(self, store: Store) -> None:
        """An update is kept once for a run that has not ended, which is then owed a pass."""
        await store.insert_run(make_run())
        await begin(store)  # the pass owed by the insert began
        kept = await store.submit_update(update("u1"))
        assert kept.kept and kept.existing is None
        run = await store.get_run("run-1")
        assert run is not None and run.pending_pass
        again = await store.submit_update(update("u1", 5))
        assert not again.kept and again.existing is not None
        assert again.existing.payload == {"n": 0, "$set": "inert"}
        stored = await store.get_update("run-1", "u1")
        assert stored is not None and stored.name == "ask" and stored.answer is None
        assert stored.created_at == update("u1").created_at

    async def test_an_update_for_an_ended_or_missing_run_is_not_kept(self, store: Store) -> None:
        """An update for an ended or missing run is not kept; an old one is still found."""
        await store.insert_run(make_run())
        assert (await store.submit_update(update("old"))).kept
        await store.set_run_status("run-1", "completed", expect=["running"])
        refused = await store.submit_update(update("new"))
        assert (refused.kept, refused.existing, refused.run_status) == (False, None, "completed")
        assert await store.get_update("run-1", "new") is None
        old = await store.submit_update(update("old"))
        assert old.existing is not None and old.existing.update_id == "old"
        missing = await store.submit_update(update("u", run_id="no-run"))
        assert (missing.kept, missing.existing, missing.run_status) == (False, None, None)
        assert await store.get_run("no-run") is None
        assert await store.get_update("no-run", "u") is None

    async def test_updates_are_consumed_oldest_first_once(self, store: Store) -> None:
        """Updates are consumed oldest first, once each; a consumer gets its own again."""
        await store.insert_run(make_run())
        for n, update_id in ((2, "c"), (0, "a"), (1, "b")):
            assert (await store.submit_update(update(update_id, n))).kept
        assert (await store.submit_update(update("z", 3, name="other"))).kept
        first = await store.consume_update("run-1", "ask", "wait-a")
        again = await store.consume_update("run-1", "ask", "wait-a")
        second = await store.consume_update("run-1", "ask", "wait-b")
        assert first is not None and again is not None and second is not None
        assert (first.update_id, again.update_id, second.update_id) == ("a", "a", "b")
        assert first.consumed_by == "wait-a"
        assert (await store.consume_update("run-1", "ask", "wait-c")).update_id == "c"  # type: ignore[union-attr]
        assert await store.consume_update("run-1", "ask", "wait-d") is None
        other = await store.consume_update("run-1", "other", "wait-e")
        assert other is not None and other.update_id == "z"

    async def test_a_run_consumes_its_own_updates_only(self, store: Store) -> None:
        """A wait takes an update of its own run, never one of another run."""
        for run_id in ("run-1", "run-2"):
            await store.insert_run(make_run(run_id))
            await store.submit_update(update(f"u-{run_id}", run_id=run_id))
        taken = await store.consume_update("run-2", "ask", "wait")
        assert taken is not None and taken.update_id == "u-run-2"
        assert await store.consume_update("run-2", "ask", "other") is None
        mine = await store.consume_update("run-1", "ask", "wait")
        assert mine is not None and mine.update_id == "u-run-1"

    async def test_concurrent_consumers_never_share_an_update(self, store: Store) -> None:
        """Concurrent consumers never share an update."""
        await store.insert_run(make_run())
        for n in range(5):
            await store.submit_update(update(f"u{n}", n))
        got = await asyncio.gather(
            *(store.consume_update("run-1", "ask", f"c{i}") for i in range(12))
        )
        assert sorted(g.update_id for g in got if g is not None) == [f"u{n}" for n in range(5)]

    async def test_the_first_answer_is_kept(self, store: Store) -> None:
        """The first answer is kept; pending updates are listed until answered."""
        await store.insert_run(make_run())
        for n in range(3):
            await store.submit_update(update(f"u{n}", n))
        at = utcnow().replace(microsecond=5)
        first = await store.answer_update("run-1", "u1", {"value": {"$ok": 1}}, answered_at=at)
        assert first is not None and first.answer == {"value": {"$ok": 1}}
        later = utcnow()
        second = await store.answer_update("run-1", "u1", {"rejected": "no"}, answered_at=later)
        assert second is not None and second.answer == {"value": {"$ok": 1}}
        assert second.answered_at == at
        assert await store.answer_update("run-1", "nope", {"value": 1}, answered_at=at) is None
        pending = await store.list_updates("run-1", pending=True)
        assert [u.update_id for u in pending] == ["u0", "u2"]
        every = await store.list_updates("run-1", pending=False)
        assert [u.update_id for u in every] == ["u0", "u1", "u2"]

    async def test_racing_answers_keep_one(self, store: Store) -> None:
        """Of racing answers, one is kept and every caller sees that one."""
        await store.insert_run(make_run())
        await store.submit_update(update("u"))
        seen = await asyncio.gather(
            *(
                store.answer_update("run-1", "u", {"value": i}, answered_at=utcnow())
                for i in range(8)
            )
        )
        answers = {str(s.answer) for s in seen if s is not None}
        assert len(answers) == 1 and len(seen) == 8

    async def test_answer_hints_name_the_run_or_end(self, store: Store) -> None:
        """Answer hints yield the run an update was answered for (or end: no hints)."""
        await store.insert_run(make_run("run-7"))
        count = iter(range(10_000))

        async def poke() -> None:
            n = next(count)
            await store.submit_update(update(f"u{n}", run_id="run-7"))
            await store.answer_update("run-7", f"u{n}", {"value": n}, answered_at=utcnow())

        assert await _hinted(store.answer_hints(), poke) in (None, "run-7")

    async def test_update_hints_wake_or_end(self, store: Store) -> None:
        """Update hints yield when an update is submitted (or end: no hints)."""
        await store.insert_run(make_run("run-7"))
        count = iter(range(10_000))

        async def poke() -> None:
            await store.submit_update(update(f"u{next(count)}", run_id="run-7"))

        await _hinted(store.update_hints(), poke)

    async def test_deleting_a_finished_run_deletes_its_values_and_updates(
        self, store: Store
    ) -> None:
        """Deleting a finished run deletes its values and updates."""
        for run_id in ("gone", "kept"):
            await store.insert_run(make_run(run_id))
            await store.submit_update(update("u", run_id=run_id))
            await store.put_value(run_id, "k", 1, branch="", position=0, written_at=utcnow())
            await store.set_run_status(run_id, "completed", expect=["running"])
        old = utcnow() + timedelta(days=1)
        await store.set_run_status("kept", "running", expect=["completed"])
        assert await store.delete_runs(finished_before=old, limit=10) == 1
        assert await store.get_value("gone", "k") is None
        assert await store.get_update("gone", "u") is None
        assert await store.get_value("kept", "k") is not None
        assert await store.get_update("kept", "u") is not None
