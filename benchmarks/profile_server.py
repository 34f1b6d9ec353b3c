"""Where the server's time of a step write goes: nx-27017 under cProfile, W3 against
the floor.

The suite measures the server's CPU per step (``/proc``) but not what it is spent on.
This starts nx-27017 with a profiler in its own process, its commands run on its event
loop's thread (nx-27017 hands each to a thread of its own, which the profiler would not
see; one client at a time, nothing is lost by it), and runs one workload against it:
W3 (one run of ``--steps`` inline steps) or the sequential floor (as many guarded
updates, on a run document in a collection with the run indexes). The server's own time
per write is then sorted into buckets: its SQLite statements (the document's JSON edits
and every index's upkeep), decoding documents from JSON, translating the query and the
update (neosqlite), the wire protocol and BSON (nx-27017 itself), its socket writes and
asyncio. Standalone and nx-27017 only: ``python -m benchmarks.profile_server
[--steps 1000]``. The profiler slows pure-Python code more than SQLite's, so compare the
two columns with each other, not with the suite's figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pstats
import signal
import subprocess
import tempfile
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import floor, ours
from benchmarks.common import Measurement
from benchmarks.profile_w1 import (
    Func,
    attribute,
    builtin,
    classifier,
    function_label,
    in_asyncio,
    in_file,
    waiting,
)

WAITING = "waiting for a command (event loop idle in epoll)"
SQLITE = "SQLite statements (the document's JSON edits, index upkeep)"
DECODE = "decoding documents from JSON"
TRANSLATE = "translating queries and updates to SQL (neosqlite)"
WIRE = "wire protocol, BSON and command handling (nx-27017)"
SOCKET = "socket writes (replies)"
ASYNCIO = "asyncio event loop"
OTHER = "unattributed"
BUCKETS = [WAITING, SQLITE, DECODE, TRANSLATE, WIRE, SOCKET, ASYNCIO, OTHER]

# Run by the server's interpreter: the profiler, commands on the loop's thread, and a
# signal that writes the profile and exits (nx-27017 keeps SIGTERM for itself).
_BOOT = """\
import asyncio, cProfile, logging, os, signal, sys
out = sys.argv.pop(1)
async def _here(func, /, *args, **kwargs):
    return func(*args, **kwargs)
asyncio.to_thread = _here
profiler = cProfile.Profile()
def _dump(*_):
    profiler.disable()
    profiler.dump_stats(out)
    os._exit(0)
signal.signal(signal.SIGUSR1, _dump)
logging.getLogger("nx_27017").setLevel(logging.WARNING)
from nx_27017.nx_27017 import main
sys.argv[0] = "nx-27017"
profiler.enable()
sys.exit(main())
"""


_own_bucket = classifier(
    [
        (waiting, WAITING),
        (builtin("sqlite3", "execute", "fetch"), SQLITE),
        (builtin("socket"), SOCKET),
        (in_file("/json/", "json_helpers"), DECODE),
        (in_file("/neosqlite/"), TRANSLATE),
        (in_file("/nx_27017/", "/bson/"), WIRE),
        (in_asyncio, ASYNCIO),
    ]
)


@dataclass
class ServerProfile:
    """One workload's server time per write, by bucket (µs), and its top functions."""

    name: str
    writes: int
    per_write_us: dict[str, float]
    statements_per_write: float
    top: list[tuple[str, float]]


def _profile(stats_path: Path, name: str, writes: int) -> ServerProfile:
    stats = pstats.Stats(str(stats_path))
    raw: dict[Func, Any] = stats.stats  # type: ignore[attr-defined]
    buckets = attribute(raw, _own_bucket, BUCKETS, OTHER)
    per_write = {k: v / writes * 1e6 for k, v in buckets.items()}
    statements = sum(
        int(v[1]) for f, v in raw.items() if f[0] == "~" and "execute" in f[2] and "sqlite" in f[2]
    )
    rows = [
        (function_label(f), v[2] / writes * 1e6)
        for f, v in raw.items()
        if _own_bucket(f) != WAITING
    ]
    rows.sort(key=lambda r: -r[1])
    return ServerProfile(name, writes, per_write, statements / writes, rows[:8])


def _profiled_server(tmp: Path, out: Path) -> Any:
    """nx-27017 with the profiler (see ``_BOOT``), on a free loopback port."""
    from tests.support.nx_servers import nx_command
    from tests.support.server_process import start_server

    def build(port: int) -> list[str]:
        cmd = nx_command(port, tmp / "nx-data", tmp, quiet=False)
        return [cmd[0], "-c", _BOOT, str(out), *cmd[3:]]

    (tmp / "nx-data").mkdir(parents=True, exist_ok=True)
    return start_server("nx-27017 (profiled)", build, tmp / "nx.out", tmp, None, 30.0, None)


def profile_one(
    name: str, workload: Callable[[str], Coroutine[Any, Any, Measurement]], writes: int
) -> ServerProfile:
    """Run ``workload`` against a profiled nx-27017 of its own; its server time."""
    with tempfile.TemporaryDirectory(prefix="pikku-server-profile-") as tmp:
        out = Path(tmp) / "server.prof"
        server = _profiled_server(Path(tmp), out)
        try:
            asyncio.run(workload(server.uri))
            server.process.send_signal(signal.SIGUSR1)
            server.process.wait(timeout=60)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError("the profiled server did not write its profile") from exc
        finally:
            server.stop()
        return _profile(out, name, writes)


def markdown(profiles: list[ServerProfile]) -> str:
    """The profiles side by side, per write (µs of the server's own time)."""
    head = " | ".join(p.name for p in profiles)
    lines = [
        f"| server time per W3 step or floor write, µs (profiled) | {head} |",
        "| --- |" + " ---: |" * len(profiles),
    ]
    for bucket in BUCKETS[1:]:
        cells = " | ".join(f"{p.per_write_us.get(bucket, 0.0):,.0f}" for p in profiles)
        lines.append(f"| {bucket} | {cells} |")
    totals = " | ".join(
        f"**{sum(v for k, v in p.per_write_us.items() if k != WAITING):,.0f}**" for p in profiles
    )
    lines.append(f"| **busy, in all** | {totals} |")
    statements = " | ".join(f"{p.statements_per_write:.1f}" for p in profiles)
    lines.append(f"| SQLite statements per write | {statements} |")
    for p in profiles:
        lines += ["", f"Top functions of {p.name} (own time, µs per step or write):", ""]
        lines += [f"- `{label}`: {us:,.0f}" for label, us in p.top]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000, help="W3 steps, and floor writes")
    args = parser.parse_args(argv)
    if os.environ.get("MONGODB_URI"):
        parser.error("profiles only an nx-27017 server it starts itself: unset MONGODB_URI")
    steps = args.steps
    profiles = [
        profile_one("W3", lambda uri: ours.w3_long_run("mongo", uri, steps), steps),
        profile_one(
            "floor, run indexes",
            lambda uri: floor.floor_sequential(uri, steps, indexed=True),
            steps,
        ),
    ]
    print(markdown(profiles))


if __name__ == "__main__":
    main()
