"""The store conformance suite: every protocol method, and the races that matter."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from engine_core.records import (
    AttemptEntry,
    EventRecord,
    InflightStep,
    RunRecord,
    StepGuard,
    StepPage,
    StepRecord,
    utcnow,
)
from engine_core.store import Store


def make_run(run_id: str = "run-1", workflow: str = "wf", **extra: Any) -> RunRecord:
    now = utcnow()
    return RunRecord(
        run_id=run_id,
        workflow=workflow,
        status="running",
        input={"n": 1},
        created_at=now,
        updated_at=now,
        **extra,
    )


def make_job(
    run_id: str, key: str, *, due_in: float = -1.0, function: str = "fn", **extra: Any
) -> StepRecord:
    now = utcnow()
    return StepRecord(
        run_id=run_id,
        key=key,
        kind="dispatch",
        status="scheduled",
        function=function,
        payload={"k": key},
        max_attempts=3,
        due_at=now + timedelta(seconds=due_in),
        scheduled_at=now,
        updated_at=now,
        **extra,
    )


async def begin(store: Store, run_id: str = "run-1") -> int:
    run = await store.begin_pass(run_id)
    assert run is not None
    return run.token


class StoreConformance:
    """What every :class:`~engine_core.store.Store` must do. Needs a ``store`` fixture."""

    # ---- runs -------------------------------------------------------------------

    async def test_insert_and_get_run_round_trips(self, store: Store) -> None:
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
        assert await store.insert_run(make_run(workflow="first")) is None
        existing = await store.insert_run(make_run(workflow="second"))
        assert existing is not None and existing.workflow == "first"
        got = await store.get_run("run-1")
        assert got is not None and got.workflow == "first"

    async def test_concurrent_inserts_of_one_run_insert_once(self, store: Store) -> None:
        results = await asyncio.gather(
            *(store.insert_run(make_run(workflow=f"w{i}")) for i in range(10))
        )
        assert sum(1 for r in results if r is None) == 1

    async def test_operator_shaped_run_id_is_just_a_string(self, store: Store) -> None:
        await store.insert_run(make_run("$ne"))
        assert await store.get_run("$ne") is not None
        assert await store.get_run("run-1") is None

    async def test_begin_pass_bumps_token_and_passes(self, store: Store) -> None:
        await store.insert_run(make_run())
        first = await store.begin_pass("run-1")
        second = await store.begin_pass("run-1")
        assert first is not None and second is not None
        assert second.token == first.token + 1
        assert (first.passes, second.passes) == (1, 2)
        assert second.pending_pass is False
        assert await store.begin_pass("missing") is None

    async def test_request_pass_sets_the_flag_begin_clears_it(self, store: Store) -> None:
        await store.insert_run(make_run())
        await begin(store)
        await store.request_pass("run-1")
        got = await store.get_run("run-1")
        assert got is not None and got.pending_pass is True
        await begin(store)
        got = await store.get_run("run-1")
        assert got is not None and got.pending_pass is False

    async def test_start_step_is_fenced_by_status_and_token(self, store: Store) -> None:
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
        )
        got = await store.get_run("run-1")
        assert got is not None and set(got.inflight) == {"c"}
        assert got.inflight["c"].attempt == 2

    async def test_settle_run_is_guarded_and_clears_inflight(self, store: Store) -> None:
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
        await store.insert_run(make_run())
        results = await asyncio.gather(
            *(store.set_run_status("run-1", "cancelled", expect=("running",)) for _ in range(8)),
            *(store.set_run_status("run-1", "suspended", expect=("running",)) for _ in range(8)),
        )
        assert sum(1 for r in results if r is not None) == 1

    async def test_child_runs_are_listed(self, store: Store) -> None:
        await store.insert_run(make_run("parent"))
        await store.insert_run(make_run("c1", parent_run_id="parent", parent_step="s"))
        await store.insert_run(make_run("c2", parent_run_id="parent", parent_step="t"))
        await store.insert_run(make_run("other"))
        children = await store.list_child_runs("parent")
        assert sorted(c.run_id for c in children) == ["c1", "c2"]
        assert {c.parent_step for c in children} == {"s", "t"}

    async def test_find_runs_needing_pass(self, store: Store) -> None:
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

    # ---- steps ------------------------------------------------------------------

    async def test_insert_step_once(self, store: Store) -> None:
        job = make_job("run-1", "s")
        assert await store.insert_step(job)
        assert not await store.insert_step(make_job("run-1", "s", function="other"))
        got = await store.get_step("run-1", "s")
        assert got is not None and got.function == "fn" and got.payload == {"k": "s"}
        assert got.max_attempts == 3 and got.kind == "dispatch"
        assert await store.get_step("run-1", "nope") is None

    async def test_concurrent_inserts_of_one_step_make_one_row(self, store: Store) -> None:
        results = await asyncio.gather(
            *(store.insert_step(make_job("run-1", "s", function=f"f{i}")) for i in range(10))
        )
        assert results.count(True) == 1
        assert len(await store.load_steps("run-1")) == 1

    async def test_concurrent_upserts_of_one_step_make_one_row(self, store: Store) -> None:
        async def upsert(attempt: int) -> bool:
            return await store.update_step(
                "run-1",
                "s",
                guard=StepGuard(attempts_below=attempt, missing_ok=True),
                changes={"status": "succeeded", "attempts": attempt, "kind": "inline"},
            )

        results = await asyncio.gather(*(upsert(1) for _ in range(10)))
        assert results.count(True) == 1
        assert len(await store.load_steps("run-1")) == 1

    async def test_update_step_fences_by_attempt(self, store: Store) -> None:
        entry = AttemptEntry(attempt=2, status="succeeded", at=utcnow(), started_at=utcnow())
        assert await store.update_step(
            "run-1",
            "s",
            guard=StepGuard(attempts_below=2, missing_ok=True),
            changes={
                "kind": "inline",
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
                guard=StepGuard(attempts_below=stale, missing_ok=True),
                changes={"status": "failed", "attempts": stale},
            )
        got = await store.get_step("run-1", "s")
        assert got is not None
        assert (got.status, got.attempts, got.result) == ("succeeded", 2, {"v": [1, "$a"]})
        assert got.compensable is True
        assert got.history == [entry]

    async def test_update_step_guards_and_history(self, store: Store) -> None:
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
        await store.insert_step(make_job("r", "late", due_in=-1))
        await store.insert_step(make_job("r", "early", due_in=-5))
        await store.insert_step(make_job("r", "future", due_in=60))
        await store.insert_step(make_job("r", "other-fn", due_in=-9, function="other"))
        first = await store.claim_step(["fn"], holder="w1", claim_ttl=30)
        second = await store.claim_step(["fn"], holder="w1", claim_ttl=30)
        assert first is not None and second is not None
        assert (first.key, second.key) == ("early", "late")
        assert first.status == "running" and first.attempts == 1
        assert first.claim_holder == "w1" and first.claim_expires_at is not None
        assert await store.claim_step(["fn"], holder="w1", claim_ttl=30) is None

    async def test_halted_jobs_are_not_claimed(self, store: Store) -> None:
        await store.insert_step(make_job("r", "s"))
        await store.halt_steps("r", True)
        assert await store.claim_step(["fn"], holder="w", claim_ttl=30) is None
        await store.halt_steps("r", False)
        assert await store.claim_step(["fn"], holder="w", claim_ttl=30) is not None

    async def test_concurrent_claims_one_winner_per_job(self, store: Store) -> None:
        for i in range(20):
            await store.insert_step(make_job("r", f"s{i:02d}"))
        claims = await asyncio.gather(
            *(store.claim_step(["fn"], holder=f"w{i}", claim_ttl=30) for i in range(60))
        )
        won = [c.key for c in claims if c is not None]
        assert sorted(won) == [f"s{i:02d}" for i in range(20)]

    async def test_lapsed_claim_is_taken_back_as_a_new_attempt(self, store: Store) -> None:
        await store.insert_step(make_job("r", "s"))
        first = await store.claim_step(["fn"], holder="dead", claim_ttl=0.05)
        assert first is not None and first.attempts == 1
        assert await store.claim_step(["fn"], holder="live", claim_ttl=30) is None
        assert await store.requeue_lapsed_claims() == 0  # still live
        await asyncio.sleep(0.1)
        assert await store.requeue_lapsed_claims() == 1
        assert await store.requeue_lapsed_claims() == 0
        second = await store.claim_step(["fn"], holder="live", claim_ttl=30)
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

    # ---- events -----------------------------------------------------------------

    async def test_events_are_consumed_oldest_first_once(self, store: Store) -> None:
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
        now = utcnow()
        for i in range(5):
            await store.insert_event(EventRecord(f"e{i}", "r", "go", i, now))
        got = await asyncio.gather(*(store.consume_event("r", "go", f"c{i}") for i in range(12)))
        taken = [g.event_id for g in got if g is not None]
        assert sorted(taken) == [f"e{i}" for i in range(5)]

    # ---- leases -----------------------------------------------------------------

    async def test_lease_acquire_refresh_release(self, store: Store) -> None:
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
        first = await store.acquire_lease("k", "a", 0.05)
        assert first is not None
        await asyncio.sleep(0.1)
        assert await store.refresh_lease(first, 30) is None
        second = await store.acquire_lease("k", "b", 30)
        assert second is not None and second.token == first.token + 1
        await store.release_lease(first)  # the old holder cannot release the new lease
        assert await store.acquire_lease("k", "c", 30) is None

    async def test_concurrent_acquires_one_winner(self, store: Store) -> None:
        got = await asyncio.gather(*(store.acquire_lease("k", f"h{i}", 30) for i in range(20)))
        assert sum(1 for g in got if g is not None) == 1
        other = await store.acquire_lease("other-key", "h", 30)
        assert other is not None

    async def test_open_pass_is_set_by_begin_and_cleared_by_settle(self, store: Store) -> None:
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

    # ---- operating (the dashboard) ----------------------------------------------

    async def test_list_runs_filters_by_id_prefix(self, store: Store) -> None:
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
        assert await store.list_workflows() == []
        for i, workflow in enumerate(["b", "a", "b", "$x.y", "a"]):
            await store.insert_run(make_run(f"r{i}", workflow=workflow))
        assert await store.list_workflows() == ["$x.y", "a", "b"]
