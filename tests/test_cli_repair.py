"""``pikku-mongo runs fork|cancel|retry`` (issue 21): one run by id, or a filter with
``--dry-run``; ``runs show`` links a fork and its original both ways. Real CLI
processes against nx-27017."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine_core import Engine, WorkflowContext, WorkflowRunFailedError
from tests.conftest import mongo_store, with_database
from tests.test_cli_operator import run


async def test_fork_cancel_and_retry_from_the_command_line(nx_uri: str) -> None:
    store = await mongo_store(nx_uri)
    store_uri = with_database(nx_uri, store.database.name)
    broken = {"on": True}

    def pay(n: int) -> int:
        if broken["on"]:
            raise ConnectionError("provider down")
        return n

    engine = Engine(store)

    @engine.workflow("pay")
    async def pay_flow(ctx: WorkflowContext, n: int) -> int:
        return await ctx.step("pay", pay, n)

    @engine.workflow("wait")
    async def wait(ctx: WorkflowContext, n: int) -> Any:
        return await ctx.wait_for_event("go")

    try:
        async with engine:
            failed = [await engine.start("pay", n, run_id=f"pay-{n}") for n in range(3)]
            for run_id in failed:
                with pytest.raises(WorkflowRunFailedError):
                    await engine.result(run_id, timeout=10)
        # A filter with --dry-run: the count and the first ids, nothing done.
        dry = run(
            "runs", "fork", "--workflow", "pay", "--status", "failed", "--dry-run", uri=store_uri
        )
        assert dry.returncode == 0, dry.stderr
        assert dry.stdout.splitlines()[0] == "3 run(s) match; nothing done (--dry-run)"
        assert "pay-0" in dry.stdout
        assert [await engine.list_forks(r) for r in failed] == [[], [], []]

        # One run by id, start-once with --new-run-id, then shown both ways.
        one = run(
            "runs",
            "fork",
            "pay-0",
            "--from",
            "pay",
            "--new-run-id",
            "fix-0",
            "--json",
            uri=store_uri,
        )
        assert one.returncode == 0, one.stderr
        assert json.loads(one.stdout) == {
            "run_id": "pay-0",
            "fork": "fix-0",
            "from_step": "pay",
            "copied": [],
            "run_again": ["pay"],
            "compensated": [],
        }
        shown = run("runs", "show", "pay-0", uri=store_uri)
        assert "forks     fix-0" in shown.stdout
        shown = run("runs", "show", "fix-0", "--json", uri=store_uri)
        assert json.loads(shown.stdout)["forked_from"] == {"run_id": "pay-0", "step": "pay"}

        # retry with a filter, then cancel with a filter.
        broken["on"] = False
        retried = run(
            "runs",
            "retry",
            "--workflow",
            "pay",
            "--error-type",
            "ConnectionError",
            "--json",
            uri=store_uri,
        )
        assert retried.returncode == 0, retried.stderr
        assert json.loads(retried.stdout)["done"] == 3
        async with engine:
            for n, run_id in enumerate(failed):
                assert await engine.result(run_id, timeout=10) == n
            await engine.start("wait", 1, run_id="waiting")
        cancelled = run("runs", "cancel", "--workflow", "wait", uri=store_uri)
        assert cancelled.returncode == 0, cancelled.stderr
        assert cancelled.stdout.startswith("1 run(s) matched, 1 cancelled, 0 skipped")
        assert (await engine.status("waiting")).status == "cancelled"

        # An id and a filter together, or neither: one line, exit 1.
        both = run("runs", "cancel", "waiting", "--workflow", "wait", uri=store_uri)
        assert both.returncode == 1 and "not both" in both.stderr
        neither = run("runs", "fork", uri=store_uri)
        assert neither.returncode == 1 and "a run id or a filter" in neither.stderr
        missing = run("runs", "fork", "pay-1", "--from", "ship", uri=store_uri)
        assert missing.returncode == 1 and "no step 'ship'" in missing.stderr
    finally:
        await store.close()
