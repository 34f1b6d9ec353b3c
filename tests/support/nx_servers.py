"""nx-27017 (NeoSQLite, SQLite-backed) as a test server: its command line and
:func:`start_nx`.

Installed in the *same* Python environment as the tests (``pip install nx-27017``) and
started as ``python -c "from nx_27017.nx_27017 import main; main()" --host 127.0.0.1
-p PORT --data-dir DIR --log-file F --pid-file F``. ``--data-dir`` is always used (one
SQLite file per logical database); ``--db`` never is. The server's storage is fixed
first (:mod:`tests.support.nx_fixes`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.support.server_process import (
    DEFAULT_START_TIMEOUT,
    HOST,
    Server,
    ServerStartError,
    start_server,
)

# ``--python-updates`` (a test's) sends every update down neosqlite's Python path, the
# one it takes when its SQL path fails (see :mod:`tests.support.nx_fixes`).
_NX_BOOT = (
    "import logging, sys\n"
    "if sys.argv[1:2] == ['--quiet']:\n"
    "    del sys.argv[1]\n"
    "    logging.getLogger('nx_27017').setLevel(logging.WARNING)\n"
    f"sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
    "import nx_fixes\n"
    "nx_fixes.apply()\n"
    "if sys.argv[1:2] == ['--python-updates']:\n"
    "    del sys.argv[1]\n"
    "    from neosqlite.collection.query_helper import set_force_fallback\n"
    "    set_force_fallback(True)\n"
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
    python_updates: bool = False,
) -> list[str]:
    """The nx-27017 command line (run with an interpreter that has nx_27017).

    ``--log-file``/``--pid-file`` are per-instance: their defaults
    (/tmp/nx_27017.{log,pid}) would make a second concurrent server refuse to
    start ("already running"). ``quiet`` drops nx's per-command INFO logging;
    ``python_updates`` sends every update down neosqlite's Python path.
    """
    cmd = [python or sys.executable, "-c", _NX_BOOT]
    if quiet:
        cmd.append("--quiet")
    if python_updates:
        cmd.append("--python-updates")
    cmd += [
        "--host", HOST,
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
    python_updates: bool = False,
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
        return nx_command(
            p, data_dir, run_dir, quiet=quiet, python=python, python_updates=python_updates
        )

    return start_server("nx-27017", build, run_dir / "nx-27017.out", run_dir, port, timeout, None)
