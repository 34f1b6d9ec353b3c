"""Start and stop the MongoDB-wire test servers used by pikku-mongo's tests.

There is no real MongoDB here; two wire-compatible servers from PyPI stand in:

* **nx-27017** (NeoSQLite, SQLite-backed). Installed in the *same* Python
  environment as the tests (``pip install nx-27017``) and started as
  ``python -c "from nx_27017.nx_27017 import main; main()" --host 127.0.0.1
  -p PORT --data-dir DIR --log-file F --pid-file F``. ``--data-dir`` is
  always used (one SQLite file per logical database); ``--db`` never is.
* **mongoeco** (in-memory engine). Needs CPython >= 3.13, so it lives in its
  own venv at ``.cache/mongoeco-venv`` (created on demand by
  :func:`ensure_mongoeco_env`) and is started through
  ``tests/support/mongoeco_server.py``.

Library use::

    from tests.support.servers import start_nx, start_mongoeco
    srv = start_nx(tmp_path)          # ready: a ping succeeded
    client = AsyncMongoClient(srv.uri)
    ...
    srv.stop()

Fault injection (see ``tests/faults``)::

    srv.kill()                        # SIGKILL: no shutdown, no flush
    srv.restart()                     # same command line: same port, same --data-dir
    srv.freeze(); srv.thaw()          # SIGSTOP / SIGCONT: connections stay open, no replies
    with srv.frozen(): ...            # thawed on the way out, whatever happens

CLI (stays up until Ctrl-C)::

    python -m tests.support.servers nx [--port N] [--data-dir DIR]
    python -m tests.support.servers mongoeco [--port N] [--engine memory|sqlite]
    python -m tests.support.servers setup-mongoeco   # only build the venv

Environment overrides: ``PIKKU_PYTHON313`` (interpreter >= 3.13 for the
mongoeco venv), ``PIKKU_MONGOECO_VENV`` (venv location).

Dependencies: stdlib + pymongo only.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType

import pymongo
from pymongo.errors import PyMongoError

__all__ = [
    "MONGOECO_VERSION",
    "Server",
    "ServerStartError",
    "ensure_mongoeco_env",
    "find_python313",
    "free_port",
    "mongoeco_venv_dir",
    "start_mongoeco",
    "start_nx",
]

#: mongoeco release the venv is pinned to (the ``wire`` extra pulls pymongo).
MONGOECO_VERSION = "4.11.0"
MONGOECO_REQUIREMENT = f"mongoeco[wire]=={MONGOECO_VERSION}"

REPO_ROOT = Path(__file__).resolve().parents[2]
MONGOECO_LAUNCHER = Path(__file__).resolve().with_name("mongoeco_server.py")
DEFAULT_START_TIMEOUT = 30.0
_HOST = "127.0.0.1"

_LIVE: set[Server] = set()
_ENV_VERIFIED: set[Path] = set()  # venvs already checked in this process
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
        self.host = _HOST
        self.port = port
        self.uri = f"mongodb://{_HOST}:{port}/?directConnection=true"
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


# --------------------------------------------------------------------------
# helpers


def free_port(host: str = _HOST) -> int:
    """A currently free TCP port on ``host`` (the usual bind-to-0 trick)."""
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


def _start(
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


# --------------------------------------------------------------------------
# nx-27017


_NX_BOOT = (
    "import logging, sys\n"
    "if sys.argv[1:2] == ['--quiet']:\n"
    "    del sys.argv[1]\n"
    "    logging.getLogger('nx_27017').setLevel(logging.WARNING)\n"
    "from nx_27017.nx_27017 import main\n"
    "sys.argv[0] = 'nx-27017'\n"
    "sys.exit(main())\n"
)


def nx_command(
    port: int,
    data_dir: Path,
    run_dir: Path,
    *,
    quiet: bool = True,
    python: str | None = None,
) -> list[str]:
    """The nx-27017 command line (run with an interpreter that has nx_27017).

    ``--log-file``/``--pid-file`` are per-instance: their defaults
    (/tmp/nx_27017.{log,pid}) would make a second concurrent server refuse to
    start ("already running"). ``quiet`` drops nx's per-command INFO logging.
    """
    cmd = [python or sys.executable, "-c", _NX_BOOT]
    if quiet:
        cmd.append("--quiet")
    cmd += [
        "--host", _HOST,
        "--port", str(port),
        "--data-dir", str(data_dir),
        "--log-file", str(run_dir / "nx-27017.log"),
        "--pid-file", str(run_dir / "nx-27017.pid"),
    ]  # fmt: skip
    return cmd


def start_nx(
    tmpdir: str | os.PathLike[str],
    *,
    port: int | None = None,
    quiet: bool = True,
    timeout: float = DEFAULT_START_TIMEOUT,
    python: str | None = None,
) -> Server:
    """Start nx-27017 with ``--data-dir TMPDIR/nx-data``; return once it pings.

    Its output goes to ``TMPDIR/nx-27017.out``. ``tmpdir`` is left in place.
    """
    import importlib.util

    if python is None and importlib.util.find_spec("nx_27017") is None:
        raise ServerStartError(
            f"nx_27017 is not importable in {sys.executable}; "
            "pip install nx-27017 (or pass python=...)"
        )
    run_dir = Path(tmpdir).resolve()
    data_dir = run_dir / "nx-data"
    data_dir.mkdir(parents=True, exist_ok=True)

    def build(p: int) -> list[str]:
        return nx_command(p, data_dir, run_dir, quiet=quiet, python=python)

    return _start("nx-27017", build, run_dir / "nx-27017.out", run_dir, port, timeout, None)


# --------------------------------------------------------------------------
# mongoeco


def mongoeco_venv_dir() -> Path:
    env = os.environ.get("PIKKU_MONGOECO_VENV")
    return Path(env) if env else REPO_ROOT / ".cache" / "mongoeco-venv"


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _python_version(exe: str | os.PathLike[str]) -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            [str(exe), "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None  # e.g. a pyenv shim for a version that is not selected
    with contextlib.suppress(ValueError):
        major, minor = (int(x) for x in out.stdout.split())
        return major, minor
    return None


def _python313_candidates() -> Iterator[str]:
    env = os.environ.get("PIKKU_PYTHON313")
    if env:
        yield env
    if sys.version_info >= (3, 13):
        yield sys.executable
    for name in ("python3.13", "python3.14", "python3.15"):
        found = shutil.which(name)
        if found:
            yield found
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    versions = pyenv_root / "versions"
    if versions.is_dir():
        for vdir in sorted(versions.iterdir(), reverse=True):
            for name in ("python3.13", "python3.14", "python3.15"):
                exe = vdir / "bin" / name
                if exe.exists():
                    yield str(exe)
    for prefix in ("/usr/local/bin", "/usr/bin"):
        for name in ("python3.13", "python3.14", "python3.15"):
            exe = Path(prefix) / name
            if exe.exists():
                yield str(exe)
    uv = shutil.which("uv")
    if uv:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [uv, "python", "find", "3.13"],
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
            )
            if out.returncode == 0 and out.stdout.strip():
                yield out.stdout.strip()


def find_python313() -> str | None:
    """Path of a working CPython >= 3.13, or None.

    Each candidate is actually run: a pyenv shim named ``python3.13`` exists
    on PATH here but fails unless that version is selected.
    """
    seen: set[str] = set()
    for cand in _python313_candidates():
        if cand in seen:
            continue
        seen.add(cand)
        ver = _python_version(cand)
        if ver is not None and ver >= (3, 13):
            return cand
    return None


def _mongoeco_env_ok(venv: Path) -> bool:
    py = _venv_python(venv)
    if not py.exists():
        return False
    probe = "import mongoeco, pymongo, mongoeco.wire.proxy;print(mongoeco.__version__)"
    try:
        out = subprocess.run(
            [str(py), "-c", probe],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and out.stdout.strip() == MONGOECO_VERSION


def ensure_mongoeco_env(python313: str | None = None, *, quiet: bool = False) -> Path | None:
    """Create/refresh the mongoeco venv idempotently; return its python.

    Returns None (after printing why) when no Python >= 3.13 is available.
    Raises ServerStartError when venv creation or pip install fails.
    Concurrent callers (e.g. pytest-xdist workers) serialise on a lock file.
    """
    venv = mongoeco_venv_dir()
    if venv in _ENV_VERIFIED or _mongoeco_env_ok(venv):
        _ENV_VERIFIED.add(venv)
        return _venv_python(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    lock_path = venv.parent / (venv.name + ".lock")
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _mongoeco_env_ok(venv):
            return _venv_python(venv)
        py313 = python313 or find_python313()
        if py313 is None:
            print(
                "mongoeco: no Python >= 3.13 found (tried PIKKU_PYTHON313, "
                "python3.13 on PATH, ~/.pyenv/versions, /usr/bin, uv)",
                file=sys.stderr,
            )
            return None
        steps: list[list[str]] = []
        if not _venv_python(venv).exists() or _python_version(_venv_python(venv)) is None:
            steps.append([py313, "-m", "venv", "--clear", str(venv)])
        pip = [str(_venv_python(venv)), "-m", "pip", "--disable-pip-version-check"]
        steps.append([*pip, "install", "-q", MONGOECO_REQUIREMENT])
        for cmd in steps:
            if not quiet:
                print("mongoeco env:", " ".join(cmd), file=sys.stderr)
            res = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if res.returncode != 0:
                raise ServerStartError(
                    f"mongoeco env setup failed: {' '.join(cmd)} "
                    f"(exit {res.returncode})\n{res.stdout[-3000:]}{res.stderr[-3000:]}"
                )
        if not _mongoeco_env_ok(venv):
            raise ServerStartError(f"mongoeco env at {venv} still not usable after install")
        _ENV_VERIFIED.add(venv)
        return _venv_python(venv)


def mongoeco_command(
    port: int,
    python: str | os.PathLike[str],
    *,
    engine: str = "memory",
    sqlite_path: str | None = None,
    dialect: str | None = None,
) -> list[str]:
    cmd = [str(python), str(MONGOECO_LAUNCHER), "--host", _HOST, "--port", str(port)]
    cmd += ["--engine", engine]
    if sqlite_path:
        cmd += ["--sqlite-path", sqlite_path]
    if dialect:
        cmd += ["--dialect", dialect]
    return cmd


def start_mongoeco(
    tmpdir: str | os.PathLike[str] | None = None,
    *,
    port: int | None = None,
    engine: str = "memory",
    dialect: str | None = None,
    timeout: float = DEFAULT_START_TIMEOUT,
    install: bool = True,
) -> Server | None:
    """Start mongoeco's wire server (in-memory engine by default).

    Returns None, with the reason printed to stderr, when no Python >= 3.13
    exists (or ``install=False`` and the venv is missing). Output goes to
    ``TMPDIR/mongoeco.out``; without ``tmpdir`` a private temp dir is used
    and removed by ``stop()``.
    """
    venv = mongoeco_venv_dir()
    if install:
        py = ensure_mongoeco_env()
    else:
        py = _venv_python(venv) if _mongoeco_env_ok(venv) else None
        if py is None:
            print(f"mongoeco: venv {venv} not ready (install=False)", file=sys.stderr)
    if py is None:
        return None
    owned: Path | None = None
    if tmpdir is None:
        owned = Path(tempfile.mkdtemp(prefix="mongoeco-"))
        run_dir = owned
    else:
        run_dir = Path(tmpdir).resolve()
        run_dir.mkdir(parents=True, exist_ok=True)
    sqlite_path = str(run_dir / "mongoeco.sqlite") if engine == "sqlite" else None

    def build(p: int) -> list[str]:
        return mongoeco_command(p, py, engine=engine, sqlite_path=sqlite_path, dialect=dialect)

    return _start("mongoeco", build, run_dir / "mongoeco.out", run_dir, port, timeout, owned)


# --------------------------------------------------------------------------
# CLI


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="which", required=True)
    p_nx = sub.add_parser("nx", help="start nx-27017")
    p_nx.add_argument("--port", type=int)
    p_nx.add_argument("--data-dir", help="run dir (default: a temp dir, removed on exit)")
    p_nx.add_argument("--verbose", action="store_true", help="keep nx per-command logging")
    p_me = sub.add_parser("mongoeco", help="start mongoeco (Python >= 3.13 venv)")
    p_me.add_argument("--port", type=int)
    p_me.add_argument("--engine", choices=("memory", "sqlite"), default="memory")
    p_me.add_argument("--dialect")
    sub.add_parser("setup-mongoeco", help=f"create {mongoeco_venv_dir()} only")
    args = parser.parse_args(argv)

    if args.which == "setup-mongoeco":
        py = ensure_mongoeco_env()
        if py is None:
            return 1
        print(py)
        return 0

    tmp: tempfile.TemporaryDirectory[str] | None = None
    srv: Server | None
    if args.which == "nx":
        if args.data_dir:
            run_dir = args.data_dir
        else:
            tmp = tempfile.TemporaryDirectory(prefix="nx-27017-")
            run_dir = tmp.name
        srv = start_nx(run_dir, port=args.port, quiet=not args.verbose)
    else:
        srv = start_mongoeco(port=args.port, engine=args.engine, dialect=args.dialect)
        if srv is None:
            return 1
    print(srv.uri, flush=True)
    print(f"(pid {srv.pid}, output in {srv.log_path}; Ctrl-C to stop)", file=sys.stderr)
    try:
        while srv.alive():
            time.sleep(0.5)
        print(f"server exited with {srv.process.returncode}:\n{srv.log_tail()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        srv.stop()
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    sys.exit(_main())
