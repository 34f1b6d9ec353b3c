"""Fixtures for the fault tests: a wire server of the test's own (it gets killed and
frozen), worker processes, a client engine, and in-process engines behind a proxy."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine_core import Engine
from pikku_mongo import MongoStore
from tests.conftest import with_database
from tests.faults.workload import LOG_PATH, read_log, register
from tests.support.proxy import FaultProxy
from tests.support.servers import Server, start_nx

ROOT = Path(__file__).resolve().parents[2]
#: Short leases so that takeovers happen within the test's time; the skew bound is
#: exercised (not 0), small enough for a 2 s lease.
LEASE_TTL = "2s"
RECOVERY_INTERVAL = "1s"
MAX_CLOCK_SKEW = "250ms"


class Fleet:
    """Worker processes (``tests.faults.worker``) started, killed, frozen by a test."""

    def __init__(self, uri: str, log: Path, errors: Path) -> None:
        self.uri = uri
        self.log = log
        self.errors = errors
        self.procs: list[subprocess.Popen[str]] = []

    def spawn(self, *flags: str, uri: str | None = None) -> subprocess.Popen[str]:
        err = open(self.errors / f"worker-{len(self.procs)}.err", "w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.worker", uri or self.uri, str(self.log),
             *flags],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        err.close()
        self.procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "ready", f"worker did not start: {line!r}\n{self.stderr()}"
        return proc

    @staticmethod
    def freeze(proc: subprocess.Popen[str]) -> None:
        proc.send_signal(signal.SIGSTOP)

    @staticmethod
    def thaw(proc: subprocess.Popen[str]) -> None:
        proc.send_signal(signal.SIGCONT)

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def records(self) -> list[dict[str, Any]]:
        return read_log(str(self.log))

    def stderr(self, limit: int = 3000) -> str:
        """The tail of every worker's stderr, for failure messages."""
        parts = []
        for path in sorted(self.errors.glob("worker-*.err")):
            text = path.read_text(errors="replace")
            parts.append(f"--- {path.name}\n{text[-limit:]}")
        return "\n".join(parts)


@pytest.fixture
def fault_server(tmp_path: Path) -> Iterator[Server]:
    """An nx-27017 of this test's own (the session's is shared, so never killed)."""
    if os.environ.get("MONGODB_URI"):
        pytest.skip("the fault tests kill and freeze their own nx-27017 server")
    server = start_nx(tmp_path / "server")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def fault_uri(fault_server: Server) -> str:
    return with_database(fault_server.uri, f"f_{uuid.uuid4().hex[:10]}")


@pytest.fixture
def fleet(fault_uri: str, tmp_path: Path) -> Iterator[Fleet]:
    made = Fleet(fault_uri, tmp_path / "executions.jsonl", tmp_path)
    try:
        yield made
    finally:
        made.stop_all()


@pytest.fixture
async def client(fault_uri: str) -> AsyncIterator[Engine]:
    """A client-mode engine (starts runs, reads them, runs nothing), direct to the server."""
    store = MongoStore.from_uri(fault_uri, max_clock_skew=MAX_CLOCK_SKEW)
    await store.init()
    engine = Engine(store, lease_ttl=LEASE_TTL)
    register(engine, functions=False)
    yield engine
    await store.close()


@pytest.fixture
async def proxy(nx_uri: str) -> AsyncIterator[FaultProxy]:
    """A proxy in this test's event loop, in front of the session's nx-27017."""
    hosts = nx_uri.split("://", 1)[1].split("/", 1)[0]
    host, _, port = hosts.rpartition(":")
    async with FaultProxy(host, int(port), seed=7) as made:
        yield made


@pytest.fixture
def exec_log(tmp_path: Path) -> Iterator[Path]:
    """The side-effect log of the steps this process runs."""
    path = tmp_path / "in-process.jsonl"
    previous = LOG_PATH["path"]
    LOG_PATH["path"] = str(path)
    try:
        yield path
    finally:
        LOG_PATH["path"] = previous


@pytest.fixture
async def proxied(proxy: FaultProxy, exec_log: Path) -> AsyncIterator[Engine]:
    """An engine in this process whose every command goes through ``proxy``."""
    store = MongoStore.from_uri(
        proxy.uri(f"p_{uuid.uuid4().hex[:10]}"), max_clock_skew=MAX_CLOCK_SKEW
    )
    await store.init()
    engine = Engine(store, lease_ttl=LEASE_TTL, recovery_interval=RECOVERY_INTERVAL,
                    undispatched_after=LEASE_TTL)  # fmt: skip
    register(engine)
    try:
        yield engine
    finally:
        with contextlib.suppress(Exception):
            await store.close()
