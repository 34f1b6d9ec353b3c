"""One clock, pinned: engine_core reads time only in its clock modules.

Everything else reads the engine's time from the clock it was handed down from
``Engine(store, clock=...)`` (``runtime.clock``, ``store.clock``), and real seconds (a
store call's timeout, a poll's backoff) through ``engine_core.common.clock.real_seconds``:
no ``datetime.now``, ``time.time``, ``time.monotonic``, ``loop.time()``, no ``utcnow``
helper, and the real clock named only where a default is chosen. A store refuses a clock
it cannot follow (MongoStore, a virtual one), and one store keeps one clock.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from engine_core import Engine
from engine_core.memory import InMemoryStore
from engine_core.testing import VirtualClock
from pikku_mongo import MongoStore
from tests.conftest import mongo_store

ROOT = Path(__file__).resolve().parents[1]
ENGINE_CORE = ROOT / "engine_core"

#: Where time is read: the engine's clock and real seconds, and the virtual clock.
CLOCK_MODULES = {"common/clock.py", "testing/virtual_clock.py"}
#: The OpenTelemetry SDK reads the queue-depth gauge in a thread of its own, with no
#: engine's clock at hand (and metrics, at the base of the package, imports nothing of
#: common): the age of a measured depth is real seconds, read there.
REAL_SECONDS_ALSO = {"metrics.py": {"time.monotonic"}}
#: Where the real clock may be named: the defaults (the engine's, the in-memory
#: store's), and the store conformance cases, which run stores on real time.
REAL_CLOCK_NAMED = {"common/clock.py", "engine.py", "memory/store.py"}

_TIME = {"time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns"}
_DATETIME = {"now", "utcnow", "today"}


def _sources() -> list[tuple[str, ast.Module]]:
    return [
        (path.relative_to(ENGINE_CORE).as_posix(), ast.parse(path.read_text()))
        for path in sorted(ENGINE_CORE.rglob("*.py"))
    ]


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return "?"


def _time_reads(tree: ast.Module) -> list[str]:
    """The raw time reads in ``tree``, as ``name`` (with its line)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "time":
            found += [f"from time import {a.name}:{node.lineno}" for a in node.names]
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name, attr = _dotted(node.func), node.func.attr
        base = name.rsplit(".", 1)[0]
        if base == "time" and attr in _TIME:
            found.append(f"{name}:{node.lineno}")
        elif base.split(".")[-1] in ("datetime", "date") and attr in _DATETIME:
            found.append(f"{name}:{node.lineno}")
        elif attr == "time" and not node.args:  # loop.time(), get_running_loop().time()
            found.append(f"{name}:{node.lineno}")
    return found


def _names(tree: ast.Module, wanted: str) -> list[int]:
    lines = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == wanted]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom | ast.Import):
            lines += [node.lineno for a in node.names if a.name == wanted]
        if isinstance(node, ast.Attribute) and node.attr == wanted:
            lines.append(node.lineno)
    return lines


def _is_case(module: str) -> bool:
    return module.startswith("testing/") and (
        module.endswith("_cases.py") or module == "testing/builders.py"
    )


def test_engine_core_reads_time_only_in_its_clock_modules() -> None:
    reads = []
    for module, tree in _sources():
        if module in CLOCK_MODULES:
            continue
        allowed = REAL_SECONDS_ALSO.get(module, set())
        reads += [f"{module}: {r}" for r in _time_reads(tree) if r.split(":")[0] not in allowed]
    assert reads == []


def test_no_utcnow_helper_outside_the_clock_module() -> None:
    # The real clock's reading, for code without an engine (MongoStore, tools); in
    # engine_core only the conformance cases build records with it.
    assert _named_outside(CLOCK_MODULES, "utcnow") == []


def test_the_real_clock_is_named_only_where_a_default_is_chosen() -> None:
    assert _named_outside(REAL_CLOCK_NAMED, "REAL_CLOCK", "RealClock") == []


def _named_outside(allowed: set[str], *names: str) -> list[str]:
    """Where engine_core names any of ``names`` outside the ``allowed`` modules and the
    conformance cases."""
    return [
        f"{module}:{line}"
        for module, tree in _sources()
        if module not in allowed and not _is_case(module)
        for name in names
        for line in _names(tree, name)
    ]


def test_the_pin_sees_the_reads_it_forbids() -> None:
    # The checks above would pass on a scanner that finds nothing.
    tree = ast.parse(
        "import time, asyncio\nfrom datetime import datetime, UTC\n"
        "a = datetime.now(UTC)\nb = time.monotonic()\nc = time.time()\n"
        "d = asyncio.get_running_loop().time()\ne = loop.time()\n"
        "from time import perf_counter\nf = datetime.datetime.utcnow()\n"
    )
    assert len(_time_reads(tree)) == 7
    assert _names(ast.parse("from x import utcnow\nutcnow()\n"), "utcnow") == [2, 1]


async def test_a_mongo_store_refuses_a_virtual_clock(nx_uri: str) -> None:
    store = await mongo_store(nx_uri)
    try:
        with pytest.raises(ValueError, match="cannot follow a virtual clock") as refused:
            Engine(store, clock=VirtualClock())
        assert "InMemoryStore" in str(refused.value)  # and says what to do instead
        Engine(store)  # the real clock: fine
    finally:
        await store.close()


def test_a_mongo_store_is_refused_at_the_engine_before_anything_connects() -> None:
    # A store from a URI that nothing serves: refused before any command is sent.
    store = MongoStore.from_uri("mongodb://127.0.0.1:1/never", serverSelectionTimeoutMS=100)
    with pytest.raises(ValueError, match="MongoStore"):
        Engine(store, clock=VirtualClock())


def test_one_in_memory_store_keeps_one_clock() -> None:
    clock = VirtualClock()
    store = InMemoryStore()
    Engine(store, clock=clock)
    Engine(store, clock=clock)  # the same clock again: fine
    with pytest.raises(ValueError, match="same clock="):
        Engine(store)  # the real clock, on a store that follows a virtual one
    shared = InMemoryStore()
    Engine(shared)
    Engine(shared)  # engines on the real clock share a store, as before
    with pytest.raises(ValueError, match="same clock="):
        Engine(shared, clock=VirtualClock())
