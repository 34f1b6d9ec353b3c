"""A fleet of worker processes for the tests that kill, freeze and restart workers
(``tests/faults``, ``tests/chaos``), both sides of it: :class:`Fleet` (from
:func:`fleet_of`) starts ``python -m MODULE URI LOG FLAGS...`` and waits for its
``ready`` line; a worker module reads its command line with :func:`worker_parser`, builds
its engine with :func:`worker_engine` and says ``ready`` in :func:`serve_until_killed`;
and :func:`client_engine` is the test's own engine on the fleet's database, which starts
runs and runs nothing."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

from engine_core import Engine
from pikku_mongo import MongoStore
from tests.support.execution_log import read_log

ROOT = Path(__file__).resolve().parents[2]


class Fleet:
    """Worker processes (``python -m module``) started, killed and frozen by a test, on
    ``uri``, logging their step executions to ``folder/executions.jsonl`` and their
    stderr to ``folder/worker-N.err``; :func:`fleet_of` stops them all at the end."""

    def __init__(self, module: str, uri: str, folder: Path) -> None:
        self.module = module
        self.uri = uri
        self.log = folder / "executions.jsonl"
        self.errors = folder
        self.procs: list[subprocess.Popen[str]] = []

    def spawn(
        self, *flags: str, uri: str | None = None, wait: bool = True
    ) -> subprocess.Popen[str]:
        """A new worker (on ``uri`` if given), once it said ``ready`` unless not ``wait``."""
        err = open(self.errors / f"worker-{len(self.procs)}.err", "w")
        proc = subprocess.Popen(
            [sys.executable, "-m", self.module, uri or self.uri, str(self.log), *flags],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        err.close()
        self.procs.append(proc)
        if wait:
            self.wait_ready(proc)
        return proc

    def wait_ready(self, proc: subprocess.Popen[str]) -> None:
        """Until ``proc`` says ``ready`` (fails with the workers' stderr if it does not)."""
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "ready", f"worker did not start: {line!r}\n{self.stderr()}"

    @staticmethod
    def kill(proc: subprocess.Popen[str]) -> None:
        """SIGKILL a worker and reap it."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()

    @staticmethod
    def freeze(proc: subprocess.Popen[str]) -> None:
        """SIGSTOP: the worker holds its leases and connections and does nothing."""
        proc.send_signal(signal.SIGSTOP)

    @staticmethod
    def thaw(proc: subprocess.Popen[str]) -> None:
        """SIGCONT: the worker goes on where it stopped."""
        proc.send_signal(signal.SIGCONT)

    def stop_all(self) -> None:
        """Terminate every worker still running (thawed first), killing the stubborn."""
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

    def records(self, kind: str | None = None) -> list[dict[str, Any]]:
        """The step executions logged so far (of one ``kind`` if given)."""
        rows = read_log(str(self.log))
        return [r for r in rows if kind is None or r["kind"] == kind]

    def stderr(self, limit: int = 3000) -> str:
        """The tail of every worker's stderr, for failure messages."""
        parts = []
        for path in sorted(self.errors.glob("worker-*.err")):
            text = path.read_text(errors="replace")
            parts.append(f"--- {path.name}\n{text[-limit:]}")
        return "\n".join(parts)


@contextlib.contextmanager
def fleet_of(module: str, uri: str, folder: Path) -> Iterator[Fleet]:
    """A :class:`Fleet` of ``module`` workers, every one of them stopped when the block
    ends."""
    fleet = Fleet(module, uri, folder)
    try:
        yield fleet
    finally:
        fleet.stop_all()


def worker_parser(
    *, lease_ttl: str, recovery_interval: str, max_clock_skew: str
) -> argparse.ArgumentParser:
    """A worker's command line: ``URI LOG`` and the engine's timings, with these
    defaults; a worker adds its own flags."""
    parser = argparse.ArgumentParser()
    parser.add_argument("uri")
    parser.add_argument("log")
    parser.add_argument("--lease-ttl", default=lease_ttl)
    parser.add_argument("--recovery-interval", default=recovery_interval)
    parser.add_argument("--max-clock-skew", default=max_clock_skew)
    parser.add_argument("--concurrency", type=int, default=16)
    return parser


def worker_engine(args: argparse.Namespace, **options: Any) -> Engine:
    """The worker's engine on its store, with the timings of its command line (a run
    not dispatched within a lease is dispatched again) and any other ``options``."""
    return Engine(
        MongoStore.from_uri(args.uri, max_clock_skew=args.max_clock_skew),
        lease_ttl=args.lease_ttl,
        recovery_interval=args.recovery_interval,
        undispatched_after=args.lease_ttl,
        concurrency=args.concurrency,
        **options,
    )


async def serve_until_killed(engine: Engine) -> None:
    """The worker's side of :meth:`Fleet.spawn`: start ``engine``, say ``ready`` and
    serve until the process is stopped."""
    async with engine:
        print("ready", flush=True)
        await asyncio.Event().wait()


@contextlib.asynccontextmanager
async def client_engine(
    uri: str, register: Callable[[Engine], None], *, lease_ttl: str, **store_options: Any
) -> AsyncIterator[Engine]:
    """An engine in client mode on ``uri`` (it starts runs and reads them, runs nothing),
    with the fleet's workflows registered by ``register``."""
    store = MongoStore.from_uri(uri, **store_options)
    await store.init()
    engine = Engine(store, lease_ttl=lease_ttl)
    register(engine)
    try:
        yield engine
    finally:
        await store.close()
