"""Conformance cases for runs: inserts, passes, fencing, status changes, listing."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from engine_core.common.clock import utcnow
from engine_core.common.journal import journals, merged_steps
from engine_core.records import EventRecord, InflightStep
from engine_core.store import Store
from engine_core.testing.builders import begin, done_step, make_job, make_run


class RunCases:
    """What a store must do with runs."""

    # ---- runs -------------------------------------------------------------------

    async def test_insert_and_get_run_round_trips(self, store: Store) -> None:
        """Insert and get run round trips."""
        run = make_run()
        run.input = {"nested": {"a": [1, 2.5, "x", None, True]}, "$weird.key": "v"}
        run.wire = {"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"}
        assert await store.insert_run(run) is None
        got = await store.get_run("run-1")
        assert got is not None
        assert got.input == run.input
        assert got.workflow == "wf" and got.status == "running"
        assert got.wire == run.wire
        assert got.pending_pass is True and got.passes == 0 and got.inflight == {}
        assert got.created_at == run.created_at
        assert await store.get_run("missing") is None

    async def test_insert_run_is_idempotent_and_keeps_the_first(self, store: Store) -> None:
        """Insert run is idempotent and keeps the first."""
        assert await store.insert_run(make_run(workflow="first")) is None
        existing = await store.insert_run(make_run(workflow="second"))
        assert existing is not None and existing.workflow == "first"
        got = await store.get_run("run-1")
        assert got is not None and got.workflow == "first"

    async def test_concurrent_inserts_of_one_run_insert_once(self, store: Store) -> None:
        """Concurrent inserts of one run insert once."""
        results = await asyncio.gather(
            *(store.insert_run(make_run(workflow=f"w{i}")) for i in range(10))
        )
        assert sum(1 for r in results if r is None) == 1

    async def test_operator_shaped_run_id_is_just_a_string(self, store: Store) -> None:
        """Operator shaped run id is just a string."""
        await store.insert_run(make_run("$ne"))
        assert await store.get_run("$ne") is not None
        assert await store.get_run("run-1") is None

    async def test_begin_pass_bumps_token_and_passes(self, store: Store) -> None:
        """Begin pass bumps token and passes."""
        await store.insert_run(make_run())
        first = await store.begin_pass("run-1", holder="a", ttl=0)
        second = await store.begin_pass("run-1", holder="b", ttl=30)
        assert first is not None and second is not None
        assert second.token == first.token + 1
        assert (first.passes, second.passes) == (1, 2)
        assert second.pending_pass is False and second.open_pass is True
        assert second.lease_holder == "b"
        assert await store.begin_pass("missing", holder="a", ttl=30) is None
        # A holder begins no pass of a workflow it does not have.
        assert await store.begin_pass("run-1", holder="c", ttl=0, workflows=["x"]) is None
        third = await store.begin_pass("run-1", holder="c", ttl=0, held=second.token,
                                       workflows=["wf", "x"])  # fmt: skip
        assert third is not None and third.token == second.token + 1

    async def test_the_run_lease_is_taken_only_when_free(self, store: Store) -> None:
        """The run lease is taken only when free."""
        await store.insert_run(make_run())
        held = await store.begin_pass("run-1", holder="a", ttl=30)
        assert held is not None
        # Live: nobody else begins a pass, and the holder goes on only with its token.
        assert await store.begin_pass("run-1", holder="b", ttl=30) is None
        assert await store.begin_pass("run-1", holder="b", ttl=30, held=held.token + 1) is None
        again = await store.begin_pass("run-1", holder="a", ttl=30, held=held.token)
        assert again is not None and again.token == held.token + 1
        assert await store.extend_pass("run-1", token=again.token, ttl=30)
        assert not await store.extend_pass("run-1", token=held.token, ttl=30)
        # A stale token releases nothing; the holder's release frees the lease.
        await store.release_pass("run-1", token=held.token)
        assert await store.begin_pass("run-1", holder="b", ttl=30) is None
        await store.release_pass("run-1", token=again.token)
        taken = await store.begin_pass("run-1", holder="b", ttl=30)
        assert taken is not None and taken.token == again.token + 1

    async def test_a_settle_frees_the_lease_unless_told_to_keep_it(self, store: Store) -> None:
        """A settle frees the lease unless told to keep it."""
        await store.insert_run(make_run())
        held = await store.begin_pass("run-1", holder="a", ttl=30)
        assert held is not None
        assert await store.settle_run(
            "run-1", token=held.token, expect=("running",), status="compensating", keep_lease=True
        )
        assert await store.begin_pass("run-1", holder="b", ttl=30) is None
        assert await store.settle_run("run-1", token=held.token, expect=("compensating",))
        assert await store.begin_pass("run-1", holder="b", ttl=30) is not None

    async def test_a_run_inserted_with_a_lease_holds_it(self, store: Store) -> None:
        """A run inserted with a lease holds it."""
        now = utcnow()
        run = make_run(
            token=1,
            passes=1,
            pending_pass=False,
            open_pass=True,
            lease_holder="a",
            lease_expires_at=now + timedelta(seconds=30),
        )
        assert await store.insert_run(run) is None
        assert await store.begin_pass("run-1", holder="b", ttl=30) is None
        assert await store.start_step(
            "run-1", token=1, status="running", key="s", attempt=1, started_at=now
        )
        got = await store.get_run("run-1")
        assert got is not None and got.lease_holder == "a" and got.token == 1

    async def test_a_parking_settle_waits_for_no_owed_pass(self, store: Store) -> None:
        """A parking settle waits for no owed pass."""
        await store.insert_run(make_run())
        token = await begin(store)
        await store.request_pass("run-1")
        assert not await store.settle_run("run-1", token=token, expect=("running",), idle_only=True)
        token = await begin(store)
        assert await store.settle_run("run-1", token=token, expect=("running",), idle_only=True)

    async def test_outcomes_ride_on_the_run_in_its_journal(self, store: Store) -> None:
        """Outcomes ride on the run in its journal."""
        await store.insert_run(make_run())
        token = await begin(store)
        now = utcnow()
        first = done_step("run-1", "a", result={"$set": {"x.y": 1}})
        assert await store.start_step(
            "run-1", token=token, status="running", key="b", attempt=1, started_at=now,
            done=["a"], outcomes=[first],
        )  # fmt: skip
        second = done_step("run-1", "b", result=[1, 2])
        assert await store.record_steps(
            "run-1", token=token, status="running", outcomes=[second], done=["b"]
        )
        got = await store.get_run("run-1")
        assert got is not None and got.inflight == {}
        if journals(store, [first, second]):
            assert got.journal == {"a": first, "b": second}
            assert await store.load_steps("run-1") == []
        else:  # written to their step records by the same writes
            assert got.journal == {}
            assert await store.load_steps("run-1") == [first, second]
        # Copied to the step records, then dropped from the journal by a later write.
        await store.save_steps([first, second])
        assert await store.settle_run("run-1", token=token, expect=("running",), forget=["a", "b"])
        got = await store.get_run("run-1")
        assert got is not None and got.journal == {}
        assert sorted(s.key for s in await store.load_steps("run-1")) == ["a", "b"]
        assert not await store.record_steps(
            "run-1", token=token + 1, status="running", outcomes=[first]
        )

    async def test_a_fenced_out_write_records_no_outcome(self, store: Store) -> None:
        """A fenced out write records no outcome."""
        await store.insert_run(make_run())
        token = await begin(store)
        now = utcnow()
        late = done_step("run-1", "a", result="late")
        for fenced in (
            store.start_step(
                "run-1", token=token + 1, status="running", key="b", attempt=1,
                started_at=now, done=["a"], outcomes=[late],
            ),
            store.start_step(
                "run-1", token=token, status="suspended", key="b", attempt=1,
                started_at=now, done=["a"], outcomes=[late],
            ),
            store.record_steps("run-1", token=token + 1, status="running", outcomes=[late]),
            store.start_step(
                "no-such-run", token=token, status="running", key="b", attempt=1,
                started_at=now, outcomes=[done_step("no-such-run", "a")],
            ),
        ):  # fmt: skip
            assert not await fenced
        got = await store.get_run("run-1")
        assert got is not None and got.journal == {} and got.inflight == {}
        assert await store.load_steps("run-1") == []
        assert await store.load_steps("no-such-run") == []
        assert await store.get_run("no-such-run") is None

    async def test_outcomes_of_many_runs_written_at_once_land_by_their_own_guard(
        self, store: Store
    ) -> None:
        """Outcomes of many runs written at once land by their own guard."""
        for n in range(6):
            await store.insert_run(make_run(f"run-{n}"))
        tokens = [await begin(store, f"run-{n}") for n in range(6)]
        # One step is at a later attempt already: its outcome is left as it is, and
        # the writes sent after it still land.
        await store.save_steps([done_step("run-2", "a", attempts=3, result="newer")])
        now = utcnow()
        # Every other run's token is stale: those writes, sent together with the rest,
        # must fail alone, and leave the outcomes they carried unwritten.
        landed = await asyncio.gather(
            *(
                store.start_step(
                    f"run-{n}", token=tokens[n] + n % 2, status="running", key="b",
                    attempt=1, started_at=now, done=["a"],
                    outcomes=[done_step(f"run-{n}", "a", result=n)],
                )
                for n in range(6)
            )
        )  # fmt: skip
        assert landed == [n % 2 == 0 for n in range(6)]
        for n in range(6):
            got = await store.get_run(f"run-{n}")
            assert got is not None
            steps = merged_steps(got, await store.load_steps(f"run-{n}"))
            if n % 2:
                assert steps == [] and got.inflight == {}
            else:
                assert [(s.key, s.result) for s in steps] == [("a", "newer" if n == 2 else n)]
                assert list(got.inflight) == ["b"]

    async def test_save_steps_never_overwrites_a_later_attempt(self, store: Store) -> None:
        """Save steps never overwrites a later attempt."""
        newer = done_step("run-1", "a", attempts=3, result="new")
        await store.save_steps([newer])
        await store.save_steps([done_step("run-1", "a", attempts=2, result="old")])
        assert await store.get_step("run-1", "a") == newer
        same = done_step("run-1", "a", attempts=3, result="again")
        await store.save_steps([same, done_step("run-1", "b")])
        assert await store.get_step("run-1", "a") == same
        got = await store.get_steps("run-1", ["a", "b", "missing"])
        assert sorted(s.key for s in got) == ["a", "b"]

    async def test_begin_reports_steps_changed_outside_passes(self, store: Store) -> None:
        """Begin reports steps changed outside passes."""
        await store.insert_run(make_run())
        await begin(store)
        await store.request_pass("run-1", changed="job")
        await store.request_pass("run-1", changed="job")
        await store.request_pass("run-1", changed="child")
        begun = await store.begin_pass("run-1", holder="a", ttl=0)
        assert begun is not None and sorted(begun.changed) == ["child", "job"]
        again = await store.begin_pass("run-1", holder="a", ttl=0)
        assert again is not None and again.changed == []

    async def test_get_runs_reads_many_at_once(self, store: Store) -> None:
        """Get runs reads many at once."""
        for run_id in ("a", "b", "c"):
            await store.insert_run(make_run(run_id))
        await store.set_run_status("b", "completed", expect=("running",))
        got = await store.get_runs(["a", "b", "missing"])
        assert sorted(r.run_id for r in got) == ["a", "b"]
        ended = await store.get_runs(["a", "b", "c"], status_in=["completed", "failed"])
        assert [r.run_id for r in ended] == ["b"]

    async def test_request_pass_sets_the_flag_begin_clears_it(self, store: Store) -> None:
        """Request pass sets the flag begin clears it."""
        await store.insert_run(make_run())
        await begin(store)
        await store.request_pass("run-1")
        got = await store.get_run("run-1")
        assert got is not None and got.pending_pass is True
        await begin(store)
        got = await store.get_run("run-1")
        assert got is not None and got.pending_pass is False

    async def test_start_step_is_fenced_by_status_and_token(self, store: Store) -> None:
        """Start step is fenced by status and token."""
        await store.insert_run(make_run())
        token = await begin(store)
        now = utcnow()
        assert await store.start_step(
            "run-1", token=token, status="running", key="a.b$c", attempt=1, started_at=now
        )
        got = await store.get_run("run-1")
        assert got is not None
        assert got.inflight == {"a.b$c": InflightStep(attempt=1, started_at=now)}
        # A newer pass fences the old one out.
        newer = await begin(store)
        assert not await store.start_step(
            "run-1", token=token, status="running", key="b", attempt=1, started_at=now
        )
        # A stop is seen at the step boundary.
        assert await store.set_run_status("run-1", "suspended", expect=("running",))
        assert not await store.start_step(
            "run-1", token=newer, status="running", key="b", attempt=1, started_at=now
        )
        assert await store.start_step(
            "run-1", token=newer, status="suspended", key="b", attempt=1, started_at=now
        )

    async def test_start_step_clears_done_keys(self, store: Store) -> None:
        """Start step clears done keys."""
        await store.insert_run(make_run())
        token = await begin(store)
        now = utcnow()
        for key in ("a", "b"):
            await store.start_step(
                "run-1", token=token, status="running", key=key, attempt=1, started_at=now
            )
        await store.start_step(
            "run-1",
            token=token,
            status="running",
            key="c",
            attempt=2,
            started_at=now,
            done=["a", "b", "c"],
            order=5,
            group=2,
        )
        got = await store.get_run("run-1")
        assert got is not None and set(got.inflight) == {"c"}
        # The mark keeps the place of a step that has no record yet (a fork point).
        assert got.inflight["c"] == InflightStep(attempt=2, started_at=now, order=5, group=2)

    async def test_settle_run_is_guarded_and_clears_inflight(self, store: Store) -> None:
        """Settle run is guarded and clears inflight."""
        await store.insert_run(make_run())
        token = await begin(store)
        await store.start_step(
            "run-1", token=token, status="running", key="a", attempt=1, started_at=utcnow()
        )
        assert not await store.settle_run(
            "run-1", token=token + 1, expect=("running",), status="completed", output=1
        )
        assert not await store.settle_run(
            "run-1", token=token, expect=("suspended",), status="completed", output=1
        )
        assert await store.settle_run("run-1", token=token, expect=("running",))
        got = await store.get_run("run-1")
        assert got is not None and got.inflight == {} and got.status == "running"
        error = {"type": "ValueError", "message": "boom", "stack": "..."}
        assert await store.settle_run(
            "run-1", token=token, expect=("running",), status="failed", error=error
        )
        got = await store.get_run("run-1")
        assert got is not None and got.status == "failed" and got.error == error
        assert (
            await store.settle_run("run-1", token=token, expect=("failed",), status="failed")
            is True
        )

    async def test_settle_run_stores_output(self, store: Store) -> None:
        """Settle run stores output."""
        await store.insert_run(make_run())
        token = await begin(store)
        assert await store.settle_run(
            "run-1",
            token=token,
            expect=("running",),
            status="completed",
            output={"ok": [1, {"$x": 2}]},
        )
        got = await store.get_run("run-1")
        assert got is not None and got.output == {"ok": [1, {"$x": 2}]}

    async def test_set_run_status_is_guarded(self, store: Store) -> None:
        """Set run status is guarded."""
        await store.insert_run(make_run())
        assert await store.set_run_status("run-1", "completed", expect=("suspended",)) is None
        error = {"type": "WorkflowRunCancelledError", "message": "cancelled"}
        after = await store.set_run_status(
            "run-1", "cancelled", expect=("running",), error=error, request_pass=True
        )
        assert after is not None and after.status == "cancelled" and after.error == error
        assert after.pending_pass is True
        assert await store.set_run_status("missing", "cancelled", expect=("running",)) is None

    async def test_concurrent_status_changes_one_wins(self, store: Store) -> None:
        """Concurrent status changes one wins."""
        await store.insert_run(make_run())
        results = await asyncio.gather(
            *(store.set_run_status("run-1", "cancelled", expect=("running",)) for _ in range(8)),
            *(store.set_run_status("run-1", "suspended", expect=("running",)) for _ in range(8)),
        )
        assert sum(1 for r in results if r is not None) == 1

    async def test_child_runs_are_listed(self, store: Store) -> None:
        """Child runs are listed."""
        await store.insert_run(make_run("parent"))
        await store.insert_run(make_run("c1", parent_run_id="parent", parent_step="s"))
        await store.insert_run(make_run("c2", parent_run_id="parent", parent_step="t"))
        await store.insert_run(make_run("other"))
        children = await store.list_child_runs("parent")
        assert sorted(c.run_id for c in children) == ["c1", "c2"]
        assert {c.parent_step for c in children} == {"s", "t"}

    async def test_find_runs_needing_pass(self, store: Store) -> None:
        """Find runs needing pass."""
        await store.insert_run(make_run("a", workflow="w1"))
        await store.insert_run(make_run("b", workflow="w2"))
        await store.insert_run(make_run("c", workflow="w1"))
        await begin(store, "c")
        await store.insert_run(make_run("d", workflow="w1"))
        await store.set_run_status("d", "suspended", expect=("running",))
        assert sorted(await store.find_runs_needing_pass(["w1"], 10)) == ["a"]
        assert sorted(await store.find_runs_needing_pass(["w1", "w2"], 10)) == ["a", "b"]
        assert len(await store.find_runs_needing_pass(["w1", "w2"], 1)) == 1

    async def test_find_idle_runs(self, store: Store) -> None:
        """Find idle runs."""
        await store.insert_run(make_run("a"))
        await store.insert_run(make_run("b"))
        token = await begin(store, "b")
        await store.start_step(
            "b", token=token, status="running", key="s", attempt=1, started_at=utcnow()
        )
        await store.insert_run(make_run("done"))
        await store.set_run_status("done", "completed", expect=("running",))
        later = utcnow() + timedelta(seconds=5)
        assert sorted(r.run_id for r in await store.find_idle_runs(later, 10)) == ["a", "b"]
        in_flight = await store.find_idle_runs(later, 10, in_flight_only=True)
        assert [r.run_id for r in in_flight] == ["b"]
        assert in_flight[0].inflight["s"].attempt == 1
        earlier = utcnow() - timedelta(seconds=60)
        assert await store.find_idle_runs(earlier, 10) == []

    async def test_list_runs_pages_by_id(self, store: Store) -> None:
        """List runs pages by id."""
        for i in range(7):
            await store.insert_run(make_run(f"r{i}", workflow="even" if i % 2 == 0 else "odd"))
        first = await store.list_runs(workflow=None, status=None, limit=3, after=None)
        assert [r.run_id for r in first] == ["r0", "r1", "r2"]
        rest = await store.list_runs(workflow=None, status=None, limit=10, after="r2")
        assert [r.run_id for r in rest] == ["r3", "r4", "r5", "r6"]
        even = await store.list_runs(workflow="even", status="running", limit=10, after=None)
        assert [r.run_id for r in even] == ["r0", "r2", "r4", "r6"]
        assert await store.list_runs(workflow=None, status="failed", limit=10, after=None) == []

    async def test_delete_runs_only_terminal_and_old(self, store: Store) -> None:
        """Delete runs only terminal and old."""
        await store.insert_run(make_run("old-done"))
        await store.insert_step(make_job("old-done", "s"))
        await store.insert_event(EventRecord("e1", "old-done", "ev", 1, utcnow()))
        await store.set_run_status("old-done", "completed", expect=("running",))
        await store.insert_run(make_run("live"))
        await store.insert_step(make_job("live", "s"))
        deleted = await store.delete_runs(
            finished_before=utcnow() + timedelta(seconds=5), limit=100
        )
        assert deleted == 1
        assert await store.get_run("old-done") is None
        assert await store.load_steps("old-done") == []
        assert await store.consume_event("old-done", "ev", "probe") is None
        assert await store.get_run("live") is not None
        assert len(await store.load_steps("live")) == 1
        assert await store.delete_runs(finished_before=utcnow() - timedelta(days=1), limit=100) == 0

    # ---- operating (the dashboard) ----------------------------------------------

    async def test_list_runs_filters_by_id_prefix(self, store: Store) -> None:
        """List runs filters by id prefix."""
        ids = ["a", "ab", "abc", "abd", "ab\x00x", "ab\x01y", "ab.*", "ab\uffff", "ab\U0001f600"]
        ids += ["ac", "b", "$ne", "a\x00", "ab/?#<"]
        for run_id in ids:
            await store.insert_run(make_run(run_id))

        async def listed(prefix: str, after: str | None = None, limit: int = 50) -> list[str]:
            runs = await store.list_runs(
                workflow=None, status=None, limit=limit, after=after, prefix=prefix
            )
            return [r.run_id for r in runs]

        for prefix in ("ab", "ab.", "ab\x00", "ab\x01", "a\x00", "$", "ab\uffff", "ab/?"):
            assert await listed(prefix) == sorted(i for i in ids if i.startswith(prefix)), prefix
        assert await listed("ab", after="abc") == ["abd", "ab\uffff", "ab\U0001f600"]
        assert await listed("ab", limit=2) == ["ab", "ab\x00x"]
        assert await listed("zz") == []
        assert await listed(".*") == []
        assert await listed("") == sorted(ids)

    async def test_list_runs_filters_by_creation_time(self, store: Store) -> None:
        """List runs filters by creation time."""
        start = utcnow() - timedelta(minutes=5)
        for i in range(4):
            run = make_run(f"r{i}", workflow="w" if i else "other")
            run.created_at = start + timedelta(seconds=i)
            await store.insert_run(run)

        async def listed(**bounds: Any) -> list[str]:
            runs = await store.list_runs(workflow=None, status=None, limit=50, after=None, **bounds)
            return [r.run_id for r in runs]

        one, three = start + timedelta(seconds=1), start + timedelta(seconds=3)
        assert await listed(created_since=one) == ["r1", "r2", "r3"]
        assert await listed(created_before=three) == ["r0", "r1", "r2"]
        assert await listed(created_since=one, created_before=three) == ["r1", "r2"]
        assert await listed(created_since=three, created_before=one) == []
        runs = await store.list_runs(
            workflow="w", status="running", limit=1, after="r1", created_since=one, prefix="r"
        )
        assert [r.run_id for r in runs] == ["r2"]

    async def test_count_runs_by_status(self, store: Store) -> None:
        """Count runs by status."""
        assert await store.count_runs() == {}
        for i in range(7):
            await store.insert_run(make_run(f"r{i}", workflow="w1" if i < 5 else "w2"))
        for run_id in ("r0", "r1", "r5"):
            await store.set_run_status(run_id, "failed", expect=("running",))
        await store.set_run_status("r2", "suspended", expect=("running",))
        assert await store.count_runs() == {"running": 3, "failed": 3, "suspended": 1}
        assert await store.count_runs(workflow="w1") == {"running": 2, "failed": 2, "suspended": 1}
        assert await store.count_runs(workflow="w2") == {"running": 1, "failed": 1}
        assert await store.count_runs(workflow="$ne") == {}

    async def test_list_workflows(self, store: Store) -> None:
        """List workflows."""
        assert await store.list_workflows() == []
        for i, workflow in enumerate(["b", "a", "b", "$x.y", "a"]):
            await store.insert_run(make_run(f"r{i}", workflow=workflow))
        assert await store.list_workflows() == ["$x.y", "a", "b"]
