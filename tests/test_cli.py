"""The ``pikku-mongo`` command-line tool, driven as a subprocess against the test server."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from engine_core import Engine, WorkflowContext, WorkflowRunFailedError
from tests.conftest import with_database

Cli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def cli_uri(nx_uri: str) -> str:
    return with_database(nx_uri, f"cli_{uuid.uuid4().hex[:12]}")


@pytest.fixture
def cli(cli_uri: str) -> Cli:
    def run(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "pikku_mongo.cli", *args],
            env={**os.environ, "MONGODB_URI": cli_uri},
            capture_output=True,
            text=True,
            timeout=60,
        )
        if ok:
            assert done.returncode == 0, done.stderr
        return done

    return run


@pytest.fixture
async def engine_on(cli_uri: str) -> AsyncIterator[Engine]:
    from pikku_mongo import MongoStore

    store = MongoStore.from_uri(cli_uri)
    await store.init()
    engine = Engine(store, lease_ttl="2s")
    ran = {"fail": True}

    def flaky() -> str:
        if ran["fail"]:
            raise RuntimeError("flaky failure")
        return "fixed"

    @engine.workflow("cli-wf")
    async def cli_wf(ctx: WorkflowContext, data: Any) -> Any:
        await ctx.step("first", lambda: "one")
        if data == "fail":
            return await ctx.step("flaky", flaky)
        if data == "wait":
            return await ctx.wait_for_event("go")
        return "done"

    engine.flaky = ran  # type: ignore[attr-defined]
    yield engine
    await store.close()


def as_json(done: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(done.stdout)


async def test_init_and_list_and_show(cli: Cli, engine_on: Engine) -> None:
    assert "indexes created" in cli("init").stdout
    async with engine_on:
        run_id = await engine_on.start("cli-wf", "ok", run_id="run-a")
        await engine_on.result(run_id, timeout=10)
        await engine_on.start("cli-wf", "wait", run_id="run-b")
        for _ in range(200):  # until it waits for its event
            if "go" in (await engine_on.status("run-b")).steps:
                break
            await asyncio.sleep(0.02)
    table = cli("runs", "list").stdout
    assert "run-a" in table and "completed" in table and "run-b" in table
    listed = as_json(cli("runs", "list", "--json", "--status", "completed"))
    assert [r["run_id"] for r in listed] == ["run-a"]
    page = cli("runs", "list", "--limit", "1").stdout  # newest first
    assert "--after run-b" in page and "run-a" not in page.split("(more")[0]
    shown = cli("runs", "show", "run-a").stdout
    assert "first" in shown and "succeeded" in shown and "attempts" in shown
    detail = as_json(cli("runs", "show", "run-a", "--json"))
    assert detail["status"] == "completed" and detail["steps"]["first"]["attempts"] == 1
    assert [h["status"] for h in detail["history"]] == ["running", "succeeded"]
    waiting = cli("runs", "show", "run-b").stdout
    assert "waits for event 'go'" in waiting


async def test_cancel_suspend_resume(cli: Cli, engine_on: Engine) -> None:
    await engine_on.start("cli-wf", "wait", run_id="s1")
    await engine_on.start("cli-wf", "wait", run_id="c1")
    assert "suspended" in cli("runs", "suspend", "s1").stdout
    assert as_json(cli("runs", "resume", "s1", "--json")) == {"run_id": "s1", "status": "running"}
    assert "cancelled" in cli("runs", "cancel", "c1").stdout
    assert (await engine_on.status("c1")).status == "cancelled"
    compensated = as_json(cli("runs", "cancel", "s1", "--compensate", "--json"))
    assert compensated["status"] == "compensating"


async def test_retry_a_failed_run(cli: Cli, engine_on: Engine) -> None:
    async with engine_on:
        run_id = await engine_on.start("cli-wf", "fail", run_id="f1")
        with pytest.raises(WorkflowRunFailedError, match="flaky failure"):
            await engine_on.result(run_id, timeout=10)
        assert "flaky failure" in cli("runs", "show", "f1").stdout
        engine_on.flaky["fail"] = False  # type: ignore[attr-defined]
        assert "running" in cli("runs", "retry", "f1").stdout
        assert await engine_on.result(run_id, timeout=10) == "fixed"


async def test_recover_and_prune(cli: Cli, engine_on: Engine) -> None:
    report = as_json(cli("recover", "--json"))
    assert set(report) == {
        "skipped",
        "woken",
        "rearmed",
        "redispatched",
        "resumed",
        "expired",
        "runs",
    }
    assert "recovery:" in cli("recover").stdout
    async with engine_on:
        run_id = await engine_on.start("cli-wf", "ok")
        await engine_on.result(run_id, timeout=10)
    assert as_json(cli("prune", "--older-than", "1h", "--json")) == {"deleted": 0}
    await asyncio.sleep(0.02)
    assert "deleted 1 finished run(s)" in cli("prune", "--older-than", "0s").stdout


def test_errors_are_one_line_with_a_non_zero_exit(cli: Cli, cli_uri: str) -> None:
    missing = cli("runs", "show", "nope", ok=False)
    assert missing.returncode == 1
    assert missing.stderr.strip() == "pikku-mongo: no run has id 'nope'"
    bad = cli("prune", "--older-than", "soon", ok=False)
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1
    no_uri = subprocess.run(
        [sys.executable, "-m", "pikku_mongo.cli", "runs", "list"],
        env={k: v for k, v in os.environ.items() if k != "MONGODB_URI"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert no_uri.returncode == 1 and "MONGODB_URI" in no_uri.stderr
    no_db = subprocess.run(
        [sys.executable, "-m", "pikku_mongo.cli", "runs", "list"],
        env={**os.environ, "MONGODB_URI": "mongodb://127.0.0.1:1/"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert no_db.returncode == 1 and len(no_db.stderr.strip().splitlines()) == 1


async def test_workers_list(cli: Cli, engine_on: Engine) -> None:
    assert "no live workers" in cli("workers", "list").stdout
    assert as_json(cli("workers", "list", "--json")) == []
    async with engine_on:
        table = cli("workers", "list").stdout
        (listed,) = as_json(cli("workers", "list", "--json"))
    assert engine_on.instance_id[:12] in table and "cli-wf" in table and "0/16" in table
    assert listed["instance_id"] == engine_on.instance_id
    assert listed["workflows"] == ["cli-wf"] and listed["versions"] == []
    assert listed["pid"] == os.getpid() and isinstance(listed["clock_offset"], float)
    assert as_json(cli("workers", "list", "--json")) == []


async def test_runs_list_and_show_give_the_version(cli: Cli, cli_uri: str) -> None:
    from pikku_mongo import MongoStore

    store = MongoStore.from_uri(cli_uri)
    engine = Engine(store)

    @engine.workflow("labelled", version="v7")
    async def labelled(ctx: WorkflowContext, data: Any) -> str:
        return "ok"

    run_id = await engine.start("labelled", run_id="labelled-1")
    await engine.drive(run_id)
    await store.close()
    listed = await asyncio.to_thread(cli, "runs", "list", "--version", "v7")
    assert "labelled-1" in listed.stdout and "v7" in listed.stdout
    assert (
        "labelled-1" not in (await asyncio.to_thread(cli, "runs", "list", "--version", "v8")).stdout
    )
    shown = await asyncio.to_thread(cli, "runs", "show", run_id)
    assert "version   v7" in shown.stdout


_APP = """
import os
from engine_core import Engine
from pikku_mongo import MongoStore

engine = Engine(MongoStore.from_uri(os.environ["MONGODB_URI"]))


def first():
    return 1


def second():
    return 2


@engine.workflow("deployed")
async def deployed(ctx, data):
    if os.environ.get("APP_BUILD") == "new":
        await ctx.step("second", second)
    await ctx.step("first", first)
    return await ctx.wait_for_event("go")
"""


def load_app(name: str, source: str, uri: str, folder: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The app module ``name`` (``source``, written into ``folder``), as its old build
    imports it on the store at ``uri``."""
    import importlib

    (folder / f"{name}.py").write_text(source)
    monkeypatch.setenv("MONGODB_URI", uri)
    monkeypatch.delenv("APP_BUILD", raising=False)
    monkeypatch.syspath_prepend(str(folder))
    return importlib.import_module(name)


def replay_check(
    app: str, uri: str, folder: Any, build: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    """``pikku-mongo replay-check --app APP`` run from ``folder``, as build ``build``."""
    return subprocess.run(
        [sys.executable, "-m", "pikku_mongo.cli", "replay-check", "--app", app, *extra],
        env={**os.environ, "MONGODB_URI": uri, "APP_BUILD": build},
        cwd=folder, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


async def test_replay_check_exits_non_zero_when_a_run_would_diverge(
    cli_uri: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = load_app("deploy_app", _APP, cli_uri, tmp_path, monkeypatch)
    run_id = await app.engine.start("deployed", run_id="live-1")
    await app.engine.drive(run_id)
    await app.engine.store.close()

    def check(build: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return replay_check("deploy_app:engine", cli_uri, tmp_path, build, *extra)

    same = await asyncio.to_thread(check, "old")
    assert same.returncode == 0, same.stderr
    assert "replayed 1 run(s): 0 would diverge" in same.stdout
    moved = await asyncio.to_thread(check, "new", "--json")
    assert moved.returncode == 1, moved.stderr
    data = json.loads(moved.stdout)
    assert data["checked"] == 1 and data["diverged"][0]["run_id"] == "live-1"
    assert data["diverged"][0]["step"] == "first" and "second" in data["diverged"][0]["found"]
    text = await asyncio.to_thread(check, "new", "--workflow", "deployed")
    assert text.returncode == 1 and "run live-1, step 'first'" in text.stdout
    bad = await asyncio.to_thread(check, "old", "--workflow", "nope")
    assert bad.returncode == 1 and "nope" in bad.stderr and "\n" not in bad.stderr.strip()


_MODEL_APP = """
import os
from pydantic import BaseModel
from engine_core import Engine
from pikku_mongo import MongoStore

engine = Engine(MongoStore.from_uri(os.environ["MONGODB_URI"]))


class Charge(BaseModel):
    charge_id: str


if os.environ.get("APP_BUILD") == "new":
    class Charge(BaseModel):  # a required field added by the new build
        charge_id: str
        currency: str


def charge() -> Charge:
    extra = {"currency": "EUR"} if "currency" in Charge.model_fields else {}
    return Charge(charge_id="ch-1", **extra)


@engine.workflow("paid")
async def paid(ctx, data):
    await ctx.step("charge", charge)
    return await ctx.wait_for_event("go")
"""


async def test_replay_check_lists_a_value_that_no_longer_fits_and_goes_on(
    cli_uri: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = load_app("model_app", _MODEL_APP, cli_uri, tmp_path, monkeypatch)
    for n in range(2):
        await app.engine.drive(await app.engine.start("paid", run_id=f"paid-{n}"))
    await app.engine.store.close()

    def check(*extra: str) -> subprocess.CompletedProcess[str]:
        return replay_check("model_app:engine", cli_uri, tmp_path, "new", *extra)

    text = await asyncio.to_thread(check)
    assert text.returncode == 1 and "Traceback" not in text.stderr, text.stderr
    assert "replayed 2 run(s): 2 would diverge" in text.stdout
    assert "value no longer fits the declared type" in text.stdout
    data = json.loads((await asyncio.to_thread(check, "--json")).stdout)
    assert [(d["run_id"], d["step"], d["reason"]) for d in data["diverged"]] == [
        (f"paid-{n}", "charge", "value no longer fits the declared type") for n in range(2)
    ]
    assert "currency" in data["diverged"][0]["found"]
