"""Start and stop the MongoDB-wire test servers used by pikku-mongo's tests.

There is no real MongoDB here; two wire-compatible servers from PyPI stand in:

* **nx-27017** (NeoSQLite, SQLite-backed): :mod:`tests.support.nx_servers`.
* **mongoeco** (in-memory engine, its own Python >= 3.13 venv):
  :mod:`tests.support.mongoeco_servers`.

The subprocess they run as (:class:`Server`, its fault injection, the shared start) is
:mod:`tests.support.server_process`. This module gathers their names and is the CLI.

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
import sys
import tempfile
import time

from tests.support.mongoeco_servers import (
    MONGOECO_VERSION,
    ensure_mongoeco_env,
    find_python313,
    mongoeco_venv_dir,
    start_mongoeco,
)
from tests.support.nx_servers import start_nx
from tests.support.server_process import Server, ServerStartError, free_port

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
