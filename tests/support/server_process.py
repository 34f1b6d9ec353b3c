"""A MongoDB-wire test server as a subprocess: :class:`Server` (stop, and the fault
injection: kill, restart, freeze, thaw), and the start every server shares (spawn, wait
for a ping, retry a lost free port). Which server runs is the caller's: see
:mod:`tests.support.nx_servers` and :mod:`tests.support.mongoeco_servers`.

Dependencies: stdlib + pymongo only.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType

import pymongo
from pymongo.errors import PyMongoError

DEFAULT_START_TIMEOUT = 30.0
HOST = "127.0.0.1"

_LIVE: set[Server] = set()
_LIVE_LOCK = threading.Lock()


class ServerStartError(RuntimeError):
    """A test server could not be started (message includes its log tail)."""


class Server:
    """A running wire-server subprocess. ``stop()`` is idempotent."""

    def __init__(
        self,
        name: str,
        port: int,
        process: subprocess.Popen[bytes],
        log_path: Path,
        owned_dir: Path | None = None,
    ) -> None:
        self.name = name
        self.host = HOST
        self.port = port
        self.uri = f"mongodb://{HOST}:{port}/?directConnection=true"
        self.process = process
        self.log_path = log_path
        self._owned_dir = owned_dir
        self._stopped = False
        self._frozen = False
        self.restarts = 0
        self.cwd = log_path.parent

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, max_chars: int = 4000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as exc:
            return f"<cannot read {self.log_path}: {exc}>"
        return text[-max_chars:]

    # ---- fault injection ----------------------------------------------------------

    def kill(self) -> None:
        """SIGKILL the server and reap it (what a crash or an OOM kill does)."""
        proc = self.process
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        proc.wait(timeout=10)
        self._frozen = False

    def restart(self, timeout: float = DEFAULT_START_TIMEOUT) -> None:
        """Start the server again with the same command line (same port, same data
        directory: nx-27017 keeps its data; mongoeco's memory engine starts empty) and
        return once it answers a ping. Kills it first if it still runs. A port still held
        by the dying process is retried until ``timeout``."""
        if self._stopped:
            raise ServerStartError(f"{self.name} was stopped for good; start a new one")
        self.kill()
        cmd = [str(a) for a in self.process.args]  # type: ignore[union-attr]
        deadline = time.monotonic() + timeout
        while True:
            self.process = _spawn(cmd, self.log_path, self.cwd)
            try:
                _wait_ready(self, max(1.0, deadline - time.monotonic()), stop_on_failure=False)
            except ServerStartError as exc:
                in_use = "address already in use" in str(exc).lower()
                if in_use and time.monotonic() < deadline:
                    self.kill()
                    time.sleep(0.2)
                    continue
                raise
            self.restarts += 1
            return

    def freeze(self) -> None:
        """SIGSTOP: the server keeps its sockets (connects still complete in the kernel's
        backlog) but answers nothing until :meth:`thaw`."""
        os.kill(self.pid, signal.SIGSTOP)
        self._frozen = True

    def thaw(self) -> None:
        """SIGCONT: the server goes on, answering what was sent meanwhile."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGCONT)
        self._frozen = False

    @property
    def is_frozen(self) -> bool:
        return self._frozen

    @contextlib.contextmanager
    def frozen(self) -> Iterator[Server]:
        """Frozen inside the block, thawed on the way out (even on an error)."""
        self.freeze()
        try:
            yield self
        finally:
            self.thaw()

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, wait up to ``timeout`` s, then SIGKILL."""
        if self._stopped:
            return
        self._stopped = True
        with _LIVE_LOCK:
            _LIVE.discard(self)
        proc = self.process
        if self._frozen:
            self.thaw()  # a stopped process would hold SIGTERM until continued
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(timeout=timeout)
        if self._owned_dir is not None:
            shutil.rmtree(self._owned_dir, ignore_errors=True)

    def __enter__(self) -> Server:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.alive() else f"exited({self.process.returncode})"
        return f"Server({self.name!r}, {self.uri!r}, pid={self.pid}, {state})"


@atexit.register
def _stop_all() -> None:
    with _LIVE_LOCK:
        servers = list(_LIVE)
    for srv in servers:
        with contextlib.suppress(Exception):
            srv.stop(timeout=2.0)


#: Its own generator: tests that seed the global one (Hypothesis does) must not make two
#: pytest-xdist workers draw the same ports.
_PORT_PICKER = random.Random()


def _ephemeral_start() -> int | None:
    """The first port of the kernel's ephemeral range (Linux), or None if unknown."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
            return int(ports.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def free_port(host: str = HOST) -> int:
    """A TCP port on ``host`` that nothing is bound to now, below the kernel's ephemeral
    range where it is known: no bind-to-0 elsewhere and no outgoing connection's local
    port can take it while its server is down (a fault test's outage, before the restart
    on the same port), and a client retrying it cannot connect to itself (a TCP
    simultaneous open, as when the kernel picks the dead server's port as the source)."""
    start = _ephemeral_start()
    if start is not None and start > 11000:
        for _ in range(200):
            port = _PORT_PICKER.randrange(10000, start)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind((host, port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """preexec_fn: SIGKILL the child if the parent dies (Linux only)."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)


def _spawn(cmd: Sequence[str], log_path: Path, cwd: Path) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # PR_SET_PDEATHSIG is tied to the *thread* that forked; only use it from
    # the main thread so a short-lived worker thread can't kill the server.
    preexec = (
        _die_with_parent
        if sys.platform.startswith("linux")
        and threading.current_thread() is threading.main_thread()
        else None
    )
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            list(cmd),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=str(cwd),
            preexec_fn=preexec,
        )


def _wait_ready(srv: Server, timeout: float, *, stop_on_failure: bool = True) -> None:
    """Poll ``ping`` until it answers; raise ServerStartError with the log."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    client: pymongo.MongoClient[dict[str, object]] = pymongo.MongoClient(
        srv.uri, serverSelectionTimeoutMS=250, connectTimeoutMS=250
    )
    try:
        while time.monotonic() < deadline:
            if not srv.alive():
                break
            try:
                client.admin.command("ping")
                return
            except PyMongoError as exc:
                last_error = exc
                time.sleep(0.05)
    finally:
        client.close()
    rc = srv.process.poll()
    why = (
        f"exited with code {rc}"
        if rc is not None
        else f"no successful ping within {timeout:.0f}s (last error: {last_error!r})"
    )
    cmd = " ".join(map(str, srv.process.args))  # type: ignore[arg-type]
    if stop_on_failure:
        srv.stop()
    raise ServerStartError(
        f"{srv.name} server {why}\ncommand: {cmd}\n"
        f"--- output ({srv.log_path}) ---\n{srv.log_tail()}"
    )


def start_server(
    name: str,
    build_cmd: Callable[[int], list[str]],
    log_path: Path,
    cwd: Path,
    port: int | None,
    timeout: float,
    owned_dir: Path | None,
) -> Server:
    attempts = 1 if port is not None else 3  # retry on a lost free-port race
    for attempt in range(attempts):
        p = port if port is not None else free_port()
        proc = _spawn(build_cmd(p), log_path, cwd)
        srv = Server(name, p, proc, log_path, owned_dir=None)
        srv.cwd = cwd
        with _LIVE_LOCK:
            _LIVE.add(srv)
        try:
            _wait_ready(srv, timeout)
        except ServerStartError as exc:
            text = str(exc).lower()
            port_lost = "address already in use" in text or "errno 98" in text
            if port_lost and attempt + 1 < attempts:
                continue
            if owned_dir is not None:
                # keep the log readable in the exception, drop the rest
                shutil.rmtree(owned_dir, ignore_errors=True)
            raise
        srv._owned_dir = owned_dir
        return srv
    raise AssertionError("unreachable")
