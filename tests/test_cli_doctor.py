"""``pikku-mongo doctor``, and every command against a server that cannot be reached:
one line on stderr, exit code 1, well within 10 s."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import with_database
from tests.support.servers import Server, free_port, start_nx

COMMANDS = [
    ["runs", "list"],
    ["runs", "show", "r1"],
    ["runs", "cancel", "r1"],
    ["runs", "cancel", "r1", "--compensate"],
    ["runs", "suspend", "r1"],
    ["runs", "resume", "r1"],
    ["runs", "retry", "r1"],
    ["recover"],
    ["prune", "--older-than", "30d"],
    ["init"],
    ["doctor"],
    ["doctor", "--json"],
    ["runs", "list", "--json"],
    ["workers", "list"],
]


Done = tuple[subprocess.CompletedProcess[str], float]


def cli(uri: str, *args: str, timeout: float = 60) -> Done:
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pikku_mongo.cli", *args],
        env={**os.environ, "MONGODB_URI": uri},
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    return done, time.monotonic() - began


def assert_one_line_failure(done: subprocess.CompletedProcess[str], took: float) -> str:
    lines = done.stderr.splitlines()
    assert done.returncode == 1, done
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr and "Topology Description" not in done.stderr
    if done.args[-2:] == ["doctor", "--json"]:  # a monitor reading it still gets JSON
        assert json.loads(done.stdout)["ok"] is False
    else:
        assert done.stdout == ""
    assert took < 10, f"{took:.1f} s"
    return lines[0]


def test_every_command_fails_fast_in_one_line_when_nothing_listens() -> None:
    uri = f"mongodb://user:secret@127.0.0.1:{free_port()}/app"
    # The CLI's own bound (about 5 s of server selection) is what the first two commands
    # meet; the others ask for 1 s in the URI, which changes nothing in the failure they
    # report, and keeps the test from waiting 5 s fourteen times.
    quick = f"{uri}?serverSelectionTimeoutMS=1000"
    uris = [uri, uri] + [quick] * (len(COMMANDS) - 2)
    # Three at a time: the machine has 2 cores (four at once took 10.3 s for one under
    # load: the bound is the CLI's, not the start-up time of processes queued for a core).
    with ThreadPoolExecutor(max_workers=3) as pool:
        outcomes = list(
            pool.map(lambda pair: cli(pair[0], *pair[1]), zip(uris, COMMANDS, strict=True))
        )
    for args, (done, took) in zip(COMMANDS, outcomes, strict=True):
        line = assert_one_line_failure(done, took)
        assert line.startswith("pikku-mongo: cannot reach the MongoDB server at "), args
        assert "secret" not in line and "mongodb://***@127.0.0.1" in line


@pytest.fixture
def frozen_server(tmp_path: Path) -> Server:
    if os.environ.get("MONGODB_URI"):
        pytest.skip("freezes a server of its own")
    server = start_nx(tmp_path)
    server.freeze()
    yield server  # type: ignore[misc]
    server.stop()


def test_a_frozen_server_is_unreachable_too(frozen_server: Server) -> None:
    uri = with_database(frozen_server.uri, "app")
    with ThreadPoolExecutor(max_workers=2) as pool:
        outcomes = list(pool.map(lambda args: cli(uri, *args), [["runs", "list"], ["doctor"]]))
    for done, took in outcomes:
        line = assert_one_line_failure(done, took)
        assert "cannot reach the MongoDB server" in line


def test_an_unknown_host_is_one_line() -> None:
    done, took = cli("mongodb://no-such-host.invalid:27017/app", "runs", "list")
    assert "cannot reach" in assert_one_line_failure(done, took)


def test_the_uri_may_choose_its_own_timeout() -> None:
    uri = f"mongodb://127.0.0.1:{free_port()}/app?serverSelectionTimeoutMS=1000"
    done, took = cli(uri, "runs", "list")
    assert_one_line_failure(done, took)
    assert took < 4


@pytest.fixture
def doctor_uri(nx_uri: str) -> str:
    return with_database(nx_uri, f"doc_{uuid.uuid4().hex[:10]}")


def test_doctor_on_a_fresh_database_fails_on_the_storage_format(doctor_uri: str) -> None:
    done, _ = cli(doctor_uri, "doctor")
    assert done.returncode == 1, done.stderr
    table = {line.split()[0]: line for line in done.stdout.splitlines()[2:] if line.strip()}
    assert "FAIL" in table["storage"] and "pikku-mongo init" in table["storage"]
    assert "warn" in table["indexes"] and "pikku-mongo init" in table["indexes"]
    assert "warn" in table["TTL"]
    assert done.stdout.rstrip().endswith("1 failure(s), 3 warning(s)")


def test_doctor_after_init(doctor_uri: str, nx_uri: str) -> None:
    assert cli(doctor_uri, "init")[0].returncode == 0
    done, _ = cli(doctor_uri, "doctor")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["check", "status", "detail"]
    width = lines[1].index(" ")  # the dashes under "check"
    rows = [line for line in lines[2:] if line.strip() and not line.startswith("ok:")]
    statuses = {line[:width].strip(): line[width:].split()[0] for line in rows}
    assert statuses == {
        "server": "ok",
        "topology": "warn",  # nx-27017 is a standalone server
        "write concern": "ok",
        "read concern": "ok",
        "change streams": "ok",
        "indexes": "ok",
        "TTL index": "ok",
        "retention": "ok",
        "clock": "ok",
        "storage format": "ok",
        "unique indexes": "ok",
        "shard keys": "ok",
        "workers": "ok",
        "stranded runs": "ok",
    }
    report = json.loads(cli(doctor_uri, "doctor", "--json")[0].stdout)
    assert report["ok"] is True and report["failures"] == 0 and report["warnings"] == 1
    checks = {c["check"]: c for c in report["checks"]}
    assert checks["server"]["version"] == "7.0.0"
    assert checks["topology"]["topology"] == "standalone"
    assert checks["write concern"]["write_concern"] == {
        "w": "majority", "j": True, "wtimeout": 10000,
    }  # fmt: skip
    assert checks["read concern"]["read_concern"] == {"level": "majority"}
    assert checks["change streams"]["change_streams"] is True
    assert checks["indexes"]["missing"] == []
    assert checks["TTL index"]["expire_after_seconds"] == 86400
    assert checks["retention"]["ttl_monitor"] is False  # the recovery pass sweeps
    assert abs(checks["clock"]["offset_s"]) < 0.1 and checks["clock"]["max_clock_skew_s"] == 1.0


def test_doctor_on_mongoeco_reports_no_change_streams(mongoeco_uri: str) -> None:
    uri = with_database(mongoeco_uri, f"doc_{uuid.uuid4().hex[:10]}")
    assert cli(uri, "init")[0].returncode == 0
    done, _ = cli(uri, "doctor", "--json")
    assert done.returncode == 0, done.stdout
    checks = {c["check"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["change streams"]["status"] == "warn"
    assert "Unsupported aggregation stage" in checks["change streams"]["detail"]
    assert "full error" not in checks["change streams"]["detail"]
    assert {c["status"] for n, c in checks.items() if n not in ("topology", "change streams")} == {
        "ok"
    }


async def test_doctor_reports_workers_clocks_and_stranded_runs(doctor_uri: str) -> None:
    from engine_core import Engine, WorkflowContext
    from pikku_mongo import MongoStore

    store = MongoStore.from_uri(doctor_uri)
    await store.init()
    worker, gone = Engine(store), Engine(store)

    @worker.workflow("served")
    async def served(ctx: WorkflowContext, data: Any) -> None:
        await ctx.wait_for_event("go")

    @gone.workflow("orphaned")
    async def orphaned(ctx: WorkflowContext, data: Any) -> None:
        return None

    @worker.workflow("dispatcher")
    async def dispatcher(ctx: WorkflowContext, data: Any) -> Any:
        return await ctx.dispatch("d", "nowhere-fn", {})

    await gone.start("orphaned", run_id="o-1")
    await gone.start("orphaned", run_id="o-2")
    try:
        async with worker:
            await worker.start("served", run_id="s-1")
            await worker.start("dispatcher", run_id="d-1")
            for _ in range(100):  # until its step waits on the queue
                if (await worker.status("d-1")).steps:
                    break
                await asyncio.sleep(0.05)
            report = json.loads(cli(doctor_uri, "doctor", "--json")[0].stdout)
    finally:
        await store.close()
    checks = {c["check"]: c for c in report["checks"]}
    (listed,) = checks["workers"]["workers"]
    assert listed["instance_id"] == worker.instance_id
    assert abs(listed["clock_offset_s"]) < 0.1
    assert checks["workers"]["status"] == "ok" and "clock offsets" in checks["workers"]["detail"]
    stranded = checks["stranded runs"]
    assert stranded["status"] == "warn"
    assert stranded["stranded"] == [
        {"workflow": "orphaned", "version": None, "runs": 2, "missing": "workflow 'orphaned'"},
        {
            "workflow": "(steps of 'nowhere-fn')",
            "version": None,
            "runs": 1,
            "missing": "step function 'nowhere-fn'",
        },
    ]
    assert "no live worker can drive these runs" in stranded["detail"]
