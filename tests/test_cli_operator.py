"""Issue 24, the command line: --uri, --version, plain help, prune's durations, and
one line (or JSON) when there is no server."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid

import pytest

from engine_core import Engine, WorkflowContext
from pikku_mongo import cli
from tests.conftest import mongo_store, with_database


def run(
    *args: str, uri: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MONGODB_URI"}
    if uri is not None:
        env["MONGODB_URI"] = uri
    return subprocess.run(
        [sys.executable, "-m", "pikku_mongo.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def dead_uri() -> str:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"mongodb://127.0.0.1:{port}/app"


def test_uri_goes_before_or_after_the_command(nx_uri: str) -> None:
    uri = with_database(nx_uri, f"cli_{uuid.uuid4().hex[:12]}")
    for args in (
        ("--uri", uri, "runs", "list", "--json"),
        ("runs", "list", "--json", "--uri", uri),
    ):
        done = run(*args)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == []
    # --uri wins over MONGODB_URI
    done = run("queues", "list", "--uri", uri, uri=dead_uri())
    assert done.returncode == 0, done.stderr
    missing = run("runs", "list")
    assert missing.returncode == 1 and "--uri" in missing.stderr


def test_version_and_plain_help(capsys: pytest.CaptureFixture[str]) -> None:
    done = run("--version")  # the module's entry point, in a process of its own
    assert done.returncode == 0 and done.stdout.startswith("pikku-mongo ")
    commands = [
        (),
        ("runs",),
        ("runs", "list"),
        ("prune",),
        ("schedules",),
        ("queues", "list"),
        ("ui",),
        ("doctor",),
    ]
    for command in commands:  # the same parser, in this process (a process each: 8 s)
        with pytest.raises(SystemExit) as exited:
            cli.main([*command, "--help"])
        shown = capsys.readouterr()
        assert exited.value.code == 0, shown.err
        assert "``" not in shown.out and "usage: pikku-mongo" in shown.out, command


async def test_prune_takes_years_and_names_its_option(nx_uri: str) -> None:
    uri = with_database(nx_uri, f"cli_{uuid.uuid4().hex[:12]}")
    done = run("prune", "--older-than", "1y", "--json", uri=uri)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"deleted": 0}
    bad = run("prune", "--older-than", "soon", uri=dead_uri())
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1
    assert "--older-than 'soon'" in bad.stderr and "older_than" not in bad.stderr


def test_ui_against_nothing_fails_within_10_s_in_one_line() -> None:
    began = time.monotonic()
    done = run("ui", "--port", "0", "--uri", dead_uri(), timeout=30)
    assert time.monotonic() - began < 10
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pikku-mongo: cannot reach"), lines
    assert "ServerSelectionTimeoutError" not in done.stderr


def test_doctor_json_against_nothing_prints_json() -> None:
    done = run("doctor", "--json", "--uri", dead_uri())
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["ok"] is False and report["checks"][0]["status"] == "fail"
    assert "cannot reach" in report["error"]
    assert len(done.stderr.strip().splitlines()) == 1


async def test_runs_list_json_has_no_partial_steps(nx_uri: str) -> None:
    store = await mongo_store(nx_uri)
    engine = Engine(store)

    @engine.workflow("three")
    async def three(ctx: WorkflowContext, data: object) -> int:
        for i in range(3):
            await ctx.step(f"s{i}", lambda n=i: n)
        return 3

    async with engine:
        run_id = await engine.start("three")
        await engine.result(run_id, timeout=10)
    uri = with_database(nx_uri, store.database.name)
    await store.close()
    [listed] = json.loads(run("runs", "list", "--json", uri=uri).stdout)
    assert listed["run_id"] == run_id and "steps" not in listed
    shown = json.loads(run("runs", "show", run_id, "--json", uri=uri).stdout)
    assert len(shown["steps"]) == 3


async def test_runs_list_is_newest_first_with_an_order_option(nx_uri: str) -> None:
    store = await mongo_store(nx_uri)
    engine = Engine(store)

    @engine.workflow("w")
    async def w(ctx: WorkflowContext, data: object) -> object:
        return data

    for run_id in ("b", "c", "a"):  # created in this order
        await engine.start("w", run_id=run_id)
    uri = with_database(nx_uri, store.database.name)
    await store.close()

    def ids(*args: str) -> list[str]:
        done = run("runs", "list", "--json", *args, uri=uri)
        assert done.returncode == 0, done.stderr
        return [r["run_id"] for r in json.loads(done.stdout)]

    assert ids() == ["a", "c", "b"]
    assert ids("--order", "oldest") == ["b", "c", "a"]
    assert ids("--order", "id") == ["a", "b", "c"]
    assert ids("--order", "newest", "--after", "c") == ["b"]
    more = run("runs", "list", "--limit", "1", "--order", "oldest", uri=uri)
    assert "(more: --after b --order oldest)" in more.stdout
    bad = run("runs", "list", "--order", "sideways", uri=uri)
    assert bad.returncode == 2 and "--order" in bad.stderr


async def test_queues_list_shows_the_limits_a_serving_process_declared(nx_uri: str) -> None:
    store = await mongo_store(nx_uri)
    engine = Engine(store)
    engine.queue("orders", concurrency=5, key_concurrency=1, rate="100/1m")
    async with engine:
        pass
    uri = with_database(nx_uri, store.database.name)
    await store.close()
    done = run("queues", "list", "--json", uri=uri)
    assert done.returncode == 0, done.stderr
    [orders] = json.loads(done.stdout)
    assert orders["name"] == "orders"
    assert (orders["concurrency"], orders["key_concurrency"]) == (5, 1)
    assert (orders["worker_concurrency"], orders["rate"]) == (None, "100/60s")
    # And a client engine that declared nothing sees them too.
    from pikku_mongo import MongoStore

    other = MongoStore.from_uri(uri)
    try:
        [seen] = await Engine(other).list_queues()
        assert (seen.concurrency, seen.key_concurrency, seen.rate) == (5, 1, "100/60s")
    finally:
        await other.close()


async def test_schedules_trigger_starts_one_run(nx_uri: str) -> None:
    store = await mongo_store(nx_uri)
    engine = Engine(store)

    @engine.workflow("report")
    async def report(ctx: WorkflowContext, data: object) -> object:
        return data

    await engine.create_schedule("nightly", "report", cron="0 3 * * *", input={"k": 2})
    await engine.pause_schedule("nightly")
    uri = with_database(nx_uri, store.database.name)
    done = run("schedules", "trigger", "nightly", "--json", uri=uri)
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["run_id"]
    assert run_id.startswith("nightly@manual-")
    async with engine:
        assert await engine.result(run_id, timeout=10) == {"k": 2}
    missing = run("schedules", "trigger", "nope", uri=uri)
    assert missing.returncode == 1 and "no schedule is named 'nope'" in missing.stderr
    await store.close()
