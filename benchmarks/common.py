"""Shared pieces of the benchmark suite: sizes, measurements, stores, command counting,
the test server and the machine description."""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import bson
from pymongo import AsyncMongoClient, monitoring

from engine_core import Engine, Store, WorkflowContext
from engine_core.memory import InMemoryStore

REPO_ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = Path(__file__).resolve().parent / "out"

StoreKind = Literal["memory", "mongo"]

#: Names of the workflows and the step function every workload registers.
INLINE_WF = "bench-inline"
SLEEP_WF = "bench-sleep"
DISPATCH_WF = "bench-dispatch"
NOOP_FN = "bench-noop"


# ---- sizes --------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    """How big each workload is (the issue's sizes, or smaller ones for ``--quick``)."""

    reps: int = 3
    w1_runs: int = 200
    w1_steps: int = 10
    #: W1 again, on a database that already holds this many steps of finished runs.
    w1_held: int = 100_000
    w2_runs: int = 500
    w2_steps: int = 10
    w3_steps: int = 1000
    w4_runs: int = 100
    w4_sleep: float = 0.5
    w5_runs: int = 100
    w5_steps: int = 10
    w5_workers: tuple[int, ...] = (1, 2, 4)
    w6_parked: tuple[int, ...] = (1_000, 10_000, 100_000)
    raw_ops: int = 2_000
    profile_runs: int = 100
    q1_depth: int = 10_000
    q1_limits: tuple[int | None, ...] = (None, 100)
    #: A1: runs of an agent making this many tool-calling model requests, then a text.
    a1_runs: int = 20
    a1_turns: int = 10

    @property
    def w5_total(self) -> int:
        return self.w5_runs * self.w5_steps


FULL = Sizes()
QUICK = Sizes(
    w1_runs=20,
    w1_held=10_000,
    w2_runs=50,
    w3_steps=200,
    w4_runs=20,
    w5_runs=20,
    w5_workers=(1, 2),
    w6_parked=(1_000, 5_000),
    raw_ops=500,
    profile_runs=20,
    q1_depth=2_000,
    a1_runs=5,
)


# ---- measurements -------------------------------------------------------------------


@dataclass
class Measurement:
    """One repetition of one workload: wall seconds, steps done, MongoDB commands sent
    (by command name; empty on the in-memory store) and workload-specific extras."""

    seconds: float
    steps: int
    commands: dict[str, int] = field(default_factory=dict)
    extra: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Measurement:
        return cls(
            seconds=float(data["seconds"]),
            steps=int(data["steps"]),
            commands={str(k): int(v) for k, v in dict(data.get("commands") or {}).items()},
            extra={str(k): float(v) for k, v in dict(data.get("extra") or {}).items()},
        )


@dataclass
class Summary:
    """The medians over the repetitions of one (workload, system, variant)."""

    workload: str
    system: str  # "memory", "mongo" or "dbos"
    variant: str  # "" or e.g. "2 workers", "10k parked"
    reps: int
    seconds: float
    steps: int
    commands_per_step: float | None
    commands: dict[str, float]
    extra: dict[str, float]
    samples: list[float]
    note: str = ""

    @property
    def per_step_ms(self) -> float:
        return self.seconds / self.steps * 1000 if self.steps else float("nan")

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds if self.seconds > 0 else float("nan")


def summarise(
    workload: str, system: str, variant: str, reps: list[Measurement], note: str = ""
) -> Summary:
    """Medians of every number over the repetitions."""
    if not reps:
        raise ValueError("no repetitions to summarise")
    names = sorted({n for m in reps for n in m.commands})
    commands = {n: statistics.median(m.commands.get(n, 0) for m in reps) for n in names}
    extras = sorted({n for m in reps for n in m.extra})
    extra = {n: statistics.median(m.extra[n] for m in reps if n in m.extra) for n in extras}
    steps = int(statistics.median(m.steps for m in reps))
    per_step = [sum(m.commands.values()) / m.steps for m in reps if m.commands and m.steps]
    return Summary(
        workload=workload,
        system=system,
        variant=variant,
        reps=len(reps),
        seconds=statistics.median(m.seconds for m in reps),
        steps=steps,
        commands_per_step=statistics.median(per_step) if per_step else None,
        commands=commands,
        extra=extra,
        samples=[m.seconds for m in reps],
        note=note,
    )


async def measure_parts(
    workload: str,
    parts: list[tuple[str, Callable[[], Awaitable[Measurement]]]],
    progress: Any,
    failed: Callable[[str, BaseException], None],
    into: list[Summary],
) -> None:
    """Each part of a MongoStore-only ``workload`` measured once (a failure is reported
    and the next part goes on), its summary appended to ``into``."""
    for variant, fn in parts:
        progress.stage(f"{workload} mongo {variant}")
        try:
            measured = await fn()
        except Exception as exc:
            failed(f"{workload} mongo {variant}", exc)
            continue
        finally:
            progress.step()
        into.append(summarise(workload, "mongo", variant, [measured]))


# ---- counting MongoDB commands ------------------------------------------------------

#: Commands whose bytes :class:`CommandCounter` sums (``bulkWrite``: the client-level one).
_WRITES = frozenset({"insert", "update", "delete", "findAndModify", "bulkWrite"})


class CommandCounter(monitoring.CommandListener):
    """Counts the commands a client sends, by name (pymongo's command monitoring), and
    the BSON bytes of their write commands (``bytes``: what the server is asked to
    write, its documents and updates included)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.bytes = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.counts[event.command_name] += 1
        if event.command_name in _WRITES:
            self.bytes += len(bson.encode(event.command))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def reset(self) -> None:
        self.counts = Counter()
        self.bytes = 0

    def snapshot(self) -> dict[str, int]:
        return dict(self.counts)


def add_counts(*parts: dict[str, int]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for part in parts:
        total.update(part)
    return dict(total)


# ---- URIs and stores ----------------------------------------------------------------


def with_database(uri: str, name: str) -> str:
    """``uri`` with its path (the database) replaced by ``name``, options kept."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        raise ValueError(f"not a MongoDB URI: {uri!r}")
    hosts, _, tail = rest.partition("/")
    _, question, options = tail.partition("?")
    return f"{scheme}://{hosts}/{name}" + (f"?{options}" if question else "")


def redact(uri: str) -> str:
    scheme, sep, rest = uri.partition("://")
    hosts, slash, tail = rest.partition("/")
    if "@" in hosts:
        hosts = "***@" + hosts.rsplit("@", 1)[1]
    return f"{scheme}{sep}{hosts}{slash}{tail}"


def fresh_db_name(tag: str) -> str:
    return f"bench_{tag}_{uuid.uuid4().hex[:10]}"


async def drop_database(uri: str, name: str) -> None:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri)
    try:
        with contextlib.suppress(Exception):
            await client.drop_database(name)
    finally:
        await client.close()


#: Extra ``MongoStore.from_uri`` options for every workload (``--write-concern``).
STORE_OPTIONS: dict[str, Any] = {}


@contextlib.asynccontextmanager
async def open_store(
    kind: StoreKind, base_uri: str | None, tag: str
) -> AsyncIterator[tuple[Store, CommandCounter | None, str | None]]:
    """A fresh store: an ``InMemoryStore``, or a ``MongoStore`` on a new database
    (dropped afterwards) whose client counts its commands. Yields (store, counter, uri)."""
    if kind == "memory":
        yield InMemoryStore(), None, None
        return
    from pikku_mongo import MongoStore

    if base_uri is None:
        raise ValueError("a MongoStore workload needs a server URI")
    name = fresh_db_name(tag)
    uri = with_database(base_uri, name)
    counter = CommandCounter()
    store = MongoStore.from_uri(uri, event_listeners=[counter], **STORE_OPTIONS)
    try:
        yield store, counter, uri
    finally:
        await store.close()
        await drop_database(base_uri, name)


# ---- the workflows every workload runs ----------------------------------------------


async def noop() -> None:
    return None


def register_inline(engine: Engine, stamps: list[float] | None = None) -> None:
    """``bench-inline``: ``input["steps"]`` no-op inline steps, one after another. With
    ``stamps``, each step appends the time it ran (for W3's growth along the run)."""
    import time

    async def stamp() -> None:
        assert stamps is not None
        stamps.append(time.perf_counter())

    step_fn = noop if stamps is None else stamp

    @engine.workflow(INLINE_WF)
    async def inline(ctx: WorkflowContext, data: dict[str, int]) -> int:
        for i in range(data["steps"]):
            await ctx.step(f"s{i}", step_fn)
        return data["steps"]


def register_sleep(engine: Engine) -> None:
    """``bench-sleep``: a step, a durable sleep of ``input["sleep"]`` seconds, a step."""

    @engine.workflow(SLEEP_WF)
    async def sleepy(ctx: WorkflowContext, data: dict[str, float]) -> int:
        await ctx.step("before", noop)
        await ctx.sleep("nap", data["sleep"])
        await ctx.step("after", noop)
        return 2


def register_dispatch(engine: Engine, *, steps_function: bool) -> None:
    """``bench-dispatch``: ``input["steps"]`` dispatched no-op steps, one after another;
    with ``steps_function``, also the step function (a worker registers it, a client
    does not)."""

    @engine.workflow(DISPATCH_WF)
    async def dispatched(ctx: WorkflowContext, data: dict[str, int]) -> int:
        for i in range(data["steps"]):
            await ctx.dispatch(f"d{i}", NOOP_FN, i)
        return data["steps"]

    if steps_function:

        @engine.step_function(NOOP_FN)
        async def noop_fn(payload: int) -> int:
            return payload


# ---- the test server ----------------------------------------------------------------


def _test_servers() -> ModuleType:
    """The test servers' support module (imported here: the suite runs without pytest)."""
    from tests.support import servers

    return servers


@dataclass
class ServerInfo:
    uri: str
    label: str
    #: The server's process id where the suite started it (its CPU and bytes are read).
    pid: int | None = None


#: The process id of the server the suite started (None: ``MONGODB_URI``, not ours).
SERVER_PID: int | None = None


@contextlib.contextmanager
def mongo_server(tmpdir: Path) -> Iterator[ServerInfo]:
    """``MONGODB_URI`` when set (nothing started), else an nx-27017 server of our own on
    a free loopback port, stopped afterwards."""
    env = os.environ.get("MONGODB_URI")
    if env:
        yield ServerInfo(uri=env, label=f"MONGODB_URI ({redact(env)})")
        return
    global SERVER_PID
    servers = _test_servers()
    server = servers.start_nx(tmpdir)
    SERVER_PID = server.pid
    try:
        version = _version("nx-27017")
        yield ServerInfo(
            uri=server.uri,
            label=f"nx-27017 {version} (MongoDB wire protocol on SQLite), "
            "started by the benchmark on 127.0.0.1",
            pid=server.pid,
        )
    finally:
        SERVER_PID = None
        server.stop()


async def server_version(uri: str) -> str:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri)
    try:
        info = await client.admin.command("buildInfo")
        return str(info.get("version", "?"))
    except Exception as exc:
        return f"? ({type(exc).__name__})"
    finally:
        await client.close()


# ---- the machine --------------------------------------------------------------------


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _memory_gib() -> str:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.0f} GiB"
    return "?"


def machine_info() -> dict[str, str]:
    cores = os.cpu_count() or 0
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = cores
    return {
        "cores": f"{usable} usable ({cores} online)",
        "cpu": _cpu_model(),
        "memory": _memory_gib(),
        "os": platform.platform(terse=True),
        "python": platform.python_version(),
        "pymongo": _version("pymongo"),
        "pikku-mongo": _version("pikku-mongo"),
        "dbos": _version("dbos"),
    }


def print_on_off(
    title: str, reps: int, measure: Callable[[bool], tuple[float, float]], off: str, on: str
) -> None:
    """Measure (wall, CPU) with a setting off and on, alternating repetition by repetition
    (so drift on a shared machine hits both alike), and print their medians as
    ``title, wall: X {off}, Y {on} (+Z %)`` and the same for CPU."""
    wall: dict[bool, list[float]] = {False: [], True: []}
    cpu: dict[bool, list[float]] = {False: [], True: []}
    for rep in range(reps):
        for setting in (False, True) if rep % 2 == 0 else (True, False):
            seconds, used = measure(setting)
            wall[setting].append(seconds)
            cpu[setting].append(used)
    for what, figures in (("wall", wall), ("CPU", cpu)):
        a, b = statistics.median(figures[False]), statistics.median(figures[True])
        print(
            f"{title}, {what}: {a:.3f} ms/step {off}, {b:.3f} {on} ({(b / a - 1) * 100:+.1f} %)",
            flush=True,
        )
