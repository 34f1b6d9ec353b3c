"""mongoeco (in-memory engine) as a test server: its venv, its command line and
:func:`start_mongoeco`.

mongoeco needs CPython >= 3.13, so it lives in its own venv at ``.cache/mongoeco-venv``
(created on demand by :func:`ensure_mongoeco_env`) and is started through
``tests/support/mongoeco_server.py``.

Environment overrides: ``PIKKU_PYTHON313`` (interpreter >= 3.13 for the mongoeco venv),
``PIKKU_MONGOECO_VENV`` (venv location).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.support.server_process import (
    DEFAULT_START_TIMEOUT,
    HOST,
    Server,
    ServerStartError,
    start_server,
)

#: mongoeco release the venv is pinned to (the ``wire`` extra pulls pymongo).
MONGOECO_VERSION = "4.11.0"
MONGOECO_REQUIREMENT = f"mongoeco[wire]=={MONGOECO_VERSION}"

REPO_ROOT = Path(__file__).resolve().parents[2]
MONGOECO_LAUNCHER = Path(__file__).resolve().with_name("mongoeco_server.py")

_ENV_VERIFIED: set[Path] = set()  # venvs already checked in this process


def mongoeco_venv_dir() -> Path:
    env = os.environ.get("PIKKU_MONGOECO_VENV")
    return Path(env) if env else REPO_ROOT / ".cache" / "mongoeco-venv"


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _run_python(
    exe: str | os.PathLike[str], code: str, timeout: float
) -> subprocess.CompletedProcess[str] | None:
    """``exe -c code`` with its output captured, or None if it could not be run."""
    try:
        return subprocess.run(
            [str(exe), "-c", code],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None


def _python_version(exe: str | os.PathLike[str]) -> tuple[int, int] | None:
    out = _run_python(exe, "import sys; print(*sys.version_info[:2])", 20)
    if out is None or out.returncode != 0:
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
    out = _run_python(py, probe, 60)
    return out is not None and out.returncode == 0 and out.stdout.strip() == MONGOECO_VERSION


def ensure_mongoeco_env(python313: str | None = None, *, quiet: bool = False) -> Path | None:
    """Create/refresh the mongoeco venv idempotently; return its python.

    Returns None (after printing why) when no Python >= 3.13 is available.
    Raises ServerStartError when venv creation or pip install fails.
    Concurrent callers (the pytest-xdist workers, each starting its own server) serialise
    on a lock file, the check included: a venv another worker is still installing into
    may already import mongoeco while missing a dependency.
    """
    venv = mongoeco_venv_dir()
    if venv in _ENV_VERIFIED:
        return _venv_python(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    lock_path = venv.parent / (venv.name + ".lock")
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _mongoeco_env_ok(venv):
            _ENV_VERIFIED.add(venv)
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
    cmd = [str(python), str(MONGOECO_LAUNCHER), "--host", HOST, "--port", str(port)]
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

    return start_server("mongoeco", build, run_dir / "mongoeco.out", run_dir, port, timeout, owned)
