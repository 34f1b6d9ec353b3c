"""Fixtures for the chaos tests: real worker processes on the MongoDB test server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine_core import Engine
from tests.chaos.worker import register
from tests.conftest import with_database

ROOT = Path(__file__).resolve().parents[2]


class Fleet:
    """Worker processes started and killed by a test; all stopped at its end."""

    def __init__(self, uri: str, log: Path) -> None:
        self.uri = uri
        self.log = log
        self.procs: list[subprocess.Popen[str]] = []

    def spawn(self, *flags: str, wait: bool = True) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.chaos.worker", self.uri, str(self.log), *flags],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.procs.append(proc)
        if wait:
            self.wait_ready(proc)
        return proc

    @staticmethod
    def wait_ready(proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "ready", f"worker did not start: {line!r}"

    @staticmethod
    def kill(proc: subprocess.Popen[str]) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def records(self, kind: str | None = None) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        rows = [json.loads(line) for line in self.log.read_text().splitlines() if line]
        return [r for r in rows if kind is None or r["kind"] == kind]


@pytest.fixture
def chaos_uri(nx_uri: str) -> str:
    return with_database(nx_uri, f"chaos_{uuid.uuid4().hex[:12]}")


@pytest.fixture
def fleet(chaos_uri: str, tmp_path: Path) -> Iterator[Fleet]:
    made = Fleet(chaos_uri, tmp_path / "executions.jsonl")
    try:
        yield made
    finally:
        made.stop_all()


@pytest.fixture
async def client(chaos_uri: str) -> AsyncIterator[Engine]:
    """An engine in client mode on the chaos database: it starts runs, runs nothing."""
    from pikku_mongo import MongoStore

    store = MongoStore.from_uri(chaos_uri)
    await store.init()
    engine = Engine(store, lease_ttl="1s")
    register(engine, functions=False, workflows=True)
    yield engine
    await store.close()


Spawner = Callable[..., subprocess.Popen[str]]
