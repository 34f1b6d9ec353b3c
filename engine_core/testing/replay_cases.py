"""Conformance cases for what divergence detection, forks and versions keep on records: a
step's order, callable and batch (in its record and in the run's journal), a run's
version label."""

from __future__ import annotations

from engine_core.common.clock import utcnow
from engine_core.common.journal import merged
from engine_core.records import StepRecord
from engine_core.store import Store
from engine_core.testing.builders import begin, done_step, make_job, make_run


class ReplayRecordCases:
    """What a store must keep for replays to be checked (docs/guides/changing-code.md)."""

    async def test_a_step_keeps_its_order_callable_and_batch(self, store: Store) -> None:
        """A step keeps its order, callable, batch and place in the body."""
        job = make_job("run-1", "j", order=3, ran="send-email")
        job.group = 2
        assert await store.insert_step(job)
        saved = done_step("run-1", "s", result=1)
        saved.order, saved.ran, saved.group, saved.loose = 0, "app.steps:charge", 7, True
        saved.made_after = "2/0"
        await store.save_steps([saved])
        got = {s.key: s for s in await store.load_steps("run-1")}
        assert got["s"].loose is True and got["j"].loose is False
        assert (got["s"].made_after, got["j"].made_after) == ("2/0", None)
        assert (got["j"].order, got["j"].ran, got["j"].group) == (3, "send-email", 2)
        assert (got["s"].order, got["s"].ran, got["s"].group) == (0, "app.steps:charge", 7)
        old = done_step("run-1", "old")  # a record from before the check says nothing
        await store.save_steps([old])
        again = await store.get_step("run-1", "old")
        assert again is not None and (again.order, again.ran) == (None, None)

    async def test_the_journal_keeps_order_callable_and_batch(self, store: Store) -> None:
        """The journal keeps order, callable, batch and place in the body."""
        await store.insert_run(make_run())
        token = await begin(store)
        first = done_step("run-1", "a", result={"$set": 1})
        first.order, first.ran, first.group, first.loose = 0, "m:f.<locals>.<lambda>", 1, True
        marker = done_step("run-1", "patched:p")
        marker.kind = "patch"
        assert await store.start_step(
            "run-1", token=token, status="running", key="b", attempt=1, started_at=utcnow(),
            done=["a"], outcomes=[first, marker],
        )  # fmt: skip
        got = await store.get_run("run-1")
        assert got is not None
        # In the journal, or in the step records (``engine_core.common.journal.journals``).
        steps = merged(got, await store.load_steps("run-1"))
        assert steps["a"].order == 0 and steps["a"].ran == "m:f.<locals>.<lambda>"
        assert steps["a"].group == 1 and steps["a"].loose is True
        assert steps["a"].made_after is None
        assert steps["patched:p"].kind == "patch"

    async def test_a_run_keeps_its_version_and_lists_filter_by_it(self, store: Store) -> None:
        """A run keeps its version and lists filter by it."""
        await store.insert_run(make_run("r-1", version="2026-12"))
        await store.insert_run(make_run("r-2", version="$ne"))
        await store.insert_run(make_run("r-3"))
        got = await store.get_run("r-1")
        assert got is not None and got.version == "2026-12"
        listed = await store.list_runs(
            workflow=None, status=None, limit=10, after=None, version="2026-12"
        )
        assert [r.run_id for r in listed] == ["r-1"]
        odd = await store.list_runs(workflow=None, status=None, limit=10, after=None, version="$ne")
        assert [r.run_id for r in odd] == ["r-2"]
        every = await store.list_runs(workflow=None, status=None, limit=10, after=None)
        assert [r.version for r in every] == ["2026-12", "$ne", None]

    async def test_load_steps_of_many_runs_at_once(self, store: Store) -> None:
        """Load steps of many runs at once."""
        await store.save_steps([done_step("run-1", "a"), done_step("run-1", "b")])
        await store.insert_step(make_job("run-2", "j"))
        await store.save_steps([done_step("run-3", "c")])
        await store.save_steps([done_step("run-10", "between")])  # an id between them
        got = await store.load_steps_of(["run-2", "run-1", "empty"])
        assert sorted(got) == ["empty", "run-1", "run-2"]
        assert sorted(s.key for s in got["run-1"]) == ["a", "b"]
        assert [s.key for s in got["run-2"]] == ["j"] and got["empty"] == []
        assert await store.load_steps_of([]) == {}

    async def test_lean_reads_keep_what_a_replay_reads(self, store: Store) -> None:
        """``lean=True`` (``replay_check``'s reads) may drop histories and times, never
        what a dry replay reads of a run and its steps."""

        def read(step: StepRecord) -> tuple[object, ...]:
            return (step.key, step.kind, step.status, step.attempts, step.result)

        def judged(step: StepRecord) -> tuple[object, ...]:
            return (*read(step), step.error, step.order, step.ran, step.event)

        ok = done_step("run-1", "a", result={"n": [1, "x"]})
        ok.order, ok.ran = 0, "app:a"
        bad = done_step("run-1", "b")
        bad.status, bad.error, bad.order, bad.ran = "failed", {"type": "E", "message": "m"}, 1, "b"
        await store.insert_run(make_run(version="v2", journal={"a": ok, "b": bad}))
        await store.insert_step(make_job("run-1", "j", order=2, ran="fn"))
        full = await store.list_runs(workflow="wf", status="running", limit=5, after=None)
        lean = await store.list_runs(
            workflow="wf", status="running", limit=5, after=None, lean=True
        )
        assert [(r.run_id, r.workflow, r.status, r.input, r.version) for r in lean] == [
            (r.run_id, r.workflow, r.status, r.input, r.version) for r in full
        ]
        assert lean[0].key_scheme == full[0].key_scheme
        assert sorted(map(judged, lean[0].journal.values())) == sorted(
            map(judged, full[0].journal.values())
        )
        steps = (await store.load_steps_of(["run-1"], lean=True))["run-1"]
        whole = (await store.load_steps_of(["run-1"]))["run-1"]
        assert sorted(map(judged, steps)) == sorted(map(judged, whole))
