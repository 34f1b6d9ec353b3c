"""The command line where the tier, the fleet and the operator meet: runs no live worker
will drive are flagged (``runs show``, ``doctor``), workers list their versions, ``runs
fork`` says what it copies and what runs again, patches are shown apart from steps,
``runs retry --status`` as its synopsis says, ``forks`` the same in every ``--json``, and
``replay-check`` lists a value that no longer fits."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from engine_core import Engine, WorkflowContext, WorkflowRunFailedError
from pikku_mongo import MongoStore
from tests.conftest import with_database
from tests.test_cli_operator import run


@pytest.fixture
async def shop(nx_uri: str) -> AsyncIterator[tuple[str, MongoStore]]:
    uri = with_database(nx_uri, f"cli_{uuid.uuid4().hex[:12]}")
    store = MongoStore.from_uri(uri, max_clock_skew=0)
    await store.init()
    try:
        yield uri, store
    finally:
        await store.database.client.drop_database(store.database.name)
        await store.close()


async def cli(uri: str, *args: str) -> Any:
    """``pikku-mongo ARGS --json`` (in a thread: the test's engines go on meanwhile)."""
    done = await asyncio.to_thread(run, *args, "--json", uri=uri)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def cli_text(uri: str, *args: str, code: int = 0) -> str:
    done = await asyncio.to_thread(run, *args, uri=uri)
    assert done.returncode == code, done.stdout + done.stderr
    return done.stdout


def register_order(engine: Engine, version: str | None, fail_pack: dict[str, bool]) -> None:
    def charge() -> str:
        return "ch-1"

    def refund(charge_id: str) -> None:
        return None

    def pack() -> str:
        if fail_pack["now"]:
            raise RuntimeError("no boxes")
        return "packed"

    @engine.workflow("order", version=version)
    async def order(ctx: WorkflowContext, data: Any) -> str:
        if await ctx.patched("rename-charge"):
            await ctx.step("charge", charge, compensate=refund)
        await ctx.step("pack", pack)
        return "done"


async def test_the_cli_flags_a_run_no_live_worker_will_drive_and_lists_versions(
    shop: tuple[str, MongoStore],
) -> None:
    uri, store = shop
    worker, old_client = Engine(store, pin_versions=True), Engine(store)
    register_order(worker, "v2", {"now": False})
    register_order(old_client, None, {"now": False})  # an older tier with the code
    async with worker:
        stranded = await old_client.start("order", run_id="o-none")  # no version: stranded
        listed = await cli(uri, "workers", "list")
        assert [(w["pinned"], w["workflow_versions"]) for w in listed] == [(True, {"order": "v2"})]
        table = await cli_text(uri, "workers", "list")
        assert "versions" in table.splitlines()[0] and "v2" in table
        shown = await cli_text(uri, "runs", "show", stranded)
        assert "no live worker drives no version of workflow 'order'" in shown
        data = await cli(uri, "runs", "show", stranded)
        assert "no version" in data["stranded"]
        report = await cli(uri, "doctor")
        check = {c["check"]: c for c in report["checks"]}["stranded runs"]
        assert check["status"] == "warn"
        [entry] = check["stranded"]
        assert (entry["workflow"], entry["version"], entry["runs"]) == ("order", None, 1)
        assert "no version of workflow 'order'" in entry["missing"]
        assert "1 run(s) of no version of workflow 'order'" in check["detail"]


async def test_runs_show_fork_retry_and_json_say_what_they_do(
    shop: tuple[str, MongoStore],
) -> None:
    uri, store = shop
    fail_pack = {"now": True}
    engine = Engine(store)
    register_order(engine, None, fail_pack)

    @engine.workflow("flaky")
    async def flaky(ctx: WorkflowContext, data: Any) -> None:
        await ctx.step("call", lambda: 1 / 0)

    async with engine:
        failed = await engine.start("flaky")
        run_id = await engine.start("order", run_id="o-1")
        with pytest.raises(WorkflowRunFailedError):
            await engine.result(run_id, timeout=10)
        shown = await cli_text(uri, "runs", "show", run_id)
        assert "patches   rename-charge" in shown
        assert "patched:" not in shown  # the marker is not a step
        data = await cli(uri, "runs", "show", run_id)
        assert data["patches"] == ["rename-charge"] and "patched:rename-charge" not in data["steps"]
        # The fork says what it copies and what runs again (the refunded charge too).
        forked = await cli_text(uri, "runs", "fork", run_id)
        assert "copied:    none" in forked
        assert "run again: charge (its compensation ran), pack" in forked
        fork = await cli(uri, "runs", "fork", run_id)
        assert fork["copied"] == [] and fork["run_again"] == ["charge", "pack"]
        # ``forks`` is a count in every --json; the ids are ``fork_ids``.
        data = await cli(uri, "runs", "show", run_id)
        assert data["forks"] == 2 and len(data["fork_ids"]) == 2
        listed = await cli(uri, "runs", "list", "--workflow", "order")
        assert all(isinstance(r.get("forks", 0), int) for r in listed)
        # runs retry --status, as the synopsis has it: "failed" is the one it takes.
        dry = await cli(uri, "runs", "retry", "--status", "failed", "--dry-run")
        assert dry["matched"] == 1 and dry["runs"][0]["run_id"] == failed
        refused = await asyncio.to_thread(run, "runs", "retry", "--status", "running", uri=uri)
        assert refused.returncode == 1 and "cannot be retried" in refused.stderr
