"""The architecture, pinned: each package's modules import one way, down a stated order of
layers, and its wings one way, down a stated order of wings (so no import circle, at
file or at wing level); nothing below the engine can reach the ``Engine`` (so none
touches its private names); engine_core knows nothing of MongoDB; no file, and no
function, grows past what a reader takes in at once. The public surfaces:
``test_public_surface.py``."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: engine_core's modules, lowest layer first. A module may import only from layers
#: strictly below its own.
LAYERS: list[set[str]] = [
    {"errors", "records", "common.tasks", "common.clock", "tracing", "metrics"},
    {"streams", "codecs.payload", "codecs.aes_gcm"},
    {"codecs.sealing"},
    {
        "store.runs",
        "store.flow",
        "store.flow_keys",
        "store.steps",
        "store.events",
        "store.streams",
        "store.talk",
        "store.fleet",
        "store.clock",
    },
    {
        "memory.cloning",
        "run.results",
        "run.threads",
        "run.step_info",
        "common.convert",
        "common.lifecycle_log",
    },
    {
        "common.durations",
        "common.sizes",
        "common.values",
        "common.options",
        "store",
        "mirror",
        "common.journal",
        "fleet.timers",
        "common.outages",
    },
    {"codecs.apart"},
    {"codecs.sealed_store"},
    {"codecs"},
    {
        "run.mismatch",
        "fleet.schemas",
        "run.keys",
        "run.journal_room",
        "common.periodic",
        "flow.queues",
        "flow.debounce",
        "schedules.times",
        "memory.flow",
        "memory.flow_keys",
        "memory.events",
        "memory.steps",
        "memory.workers",
        "memory.streams",
        "memory.talk",
    },
    {"memory.store", "run.branches", "run.branch_order", "flow.rate_windows"},
    {"run.calls"},
    {"run.update_request"},
    {
        "common.status",
        "fleet.waiters",
        "fleet.talk_waiters",
        "memory",
        "common.runtime",
        "run.context",
        "run.divergence",
        "run.transitions",
        "run.leases",
        "flow.queue_slots",
        "flow.starts",
        "fleet.registry",
        "fleet.time_waits",
    },
    {
        "testing.builders",
        "testing.virtual_clock",
        "run.reentry",
        "run.streams",
        "run.values",
        "run.signals",
        "run.body_hooks",
    },
    {
        "run.attempt",
        "run.control",
        "run.fork",
        "run.bulk",
        "flow.queue_figures",
        "testing.run_cases",
        "testing.step_cases",
        "testing.event_lease_cases",
        "testing.flow_cases",
        "testing.flow_key_cases",
        "testing.schedule_cases",
        "testing.worker_cases",
        "testing.replay_cases",
        "testing.operator_cases",
        "testing.fork_cases",
        "testing.stream_cases",
        "testing.talk_cases",
        "testing.retention_cases",
    },
    {"testing.conformance"},
    {"testing"},
    {"run.pass_state"},
    {"run.inline", "run.waits", "run.patches"},
    {"run.run_pass", "run.stream_reader"},
    {
        "run.driver",
        "run.replay_check",
        "fleet.worker",
        "fleet.recovery",
        "flow.admission",
        "flow.run_timers",
        "schedules.scheduler",
    },
    {"schedules.control", "schedules.declared"},
    {"run", "fleet", "flow", "schedules", "common", "front"},
    {"pydantic_ai.events"},
    {"pydantic_ai.units"},
    {"pydantic_ai.durability"},
    {"pydantic_ai"},
    {"front.host"},
    {"front.starting"},
    {"front.schedule_api", "front.repair_api", "front.talk_api", "front.listing_api"},
    {"engine"},
    {"__init__"},
]

#: engine_core's wings, lowest first: the modules at the top of the package that every
#: wing shares, all public ("base"), what every wing shares that no user imports
#: ("common"), the wings, then the Engine and its parts ("front": ``engine.py``, the
#: package's ``__init__`` and ``front/``). A module may import from its own wing and the
#: wings below it, never from one above.
WINGS: list[str] = [
    "base",
    "store",
    "common",
    "codecs",
    "memory",
    "testing",
    "run",
    "fleet",
    "flow",
    "schedules",
    "pydantic_ai",
    "front",
]
FRONT = {"engine", "__init__"}

#: pikku_mongo's modules, lowest layer first, wing by wing (see ``MONGO_WINGS``). A module
#: may import only from layers strictly below its own.
MONGO_LAYERS: list[set[str]] = [
    # base: what every wing shares
    {"errors"},
    # wire: documents, encodings, filters, retries, the server's facts, causal reads
    {
        "wire.checks",
        "wire.encoding",
        "wire.causal",
        "wire.command_metrics",
        "wire.indexes",
        "wire.uri",
    },
    {"wire.journal_text", "wire.server", "wire.watch", "wire.flow_fields"},
    {"wire.skew"},
    {"wire.documents", "wire.retry"},
    {"wire.event_docs"},
    {"wire.shard_keys"},
    {"wire.filters"},
    {"wire"},
    # writes: group commit, riding writes, the journal's writes and pages, operation ids
    {"writes.queued", "writes.op_ids", "writes.journal_writes"},
    {"writes.riding", "writes.journal_pages"},
    {"writes.batcher"},
    {"writes"},
    # store: MongoStore and its parts
    {"store.served", "store.options", "store.declared_ops", "store.worker_ops"},
    {
        "store.lease_ops",
        "store.event_ops",
        "store.fork_ops",
        "store.listing",
        "store.value_ops",
        "store.offload_ops",
    },
    {"store.schedule_ops", "store.stream_ops", "store.job_index", "store.line_index"},
    {"store.dedup_ops", "store.targeting", "store.key_ops", "store.update_ops", "store.owned"},
    {"store.runs_part"},
    {"store.prune_ops"},
    {"store.migrations", "store.queue_ops", "store.run_ops", "store.step_ops"},
    {"store.debounce_ops"},
    {"store.mongo_store"},
    {"store"},
    # doctor
    {"doctor.report", "doctor.stranded"},
    {"doctor.fleet", "doctor.shards"},
    {"doctor.diagnosis"},
    {"doctor"},
    # dashboard
    {
        "dashboard.actions",
        "dashboard.headers",
        "dashboard.links",
        "dashboard.metrics_page",
        "dashboard.params",
        "dashboard.secret",
        "dashboard.streams_view",
        "dashboard.views",
    },
    {"dashboard.security", "dashboard.waiting"},
    {"dashboard.rendering"},
    {
        "dashboard.bulk_pages",
        "dashboard.login_pages",
        "dashboard.queue_pages",
        "dashboard.schedule_pages",
        "dashboard.worker_pages",
    },
    {"dashboard.run_pages"},
    {"dashboard.app"},
    {"dashboard", "dashboard.serve"},
    # cli
    {"cli.repair", "cli.replay", "cli.tail", "cli.talk", "cli.text"},
    {"cli.commands", "cli.parser"},
    {"cli.console"},
    {"cli", "cli.__main__"},
    # front
    {"__init__"},
]

#: pikku_mongo's wings, lowest first: the modules at the top of the package ("base"),
#: the wings, then the package's ``__init__`` ("front").
MONGO_WINGS: list[str] = ["base", "wire", "writes", "store", "doctor", "dashboard", "cli", "front"]

#: Per package: its layers, its wings and the modules at its top that face the user.
PACKAGES = {
    "engine_core": (LAYERS, WINGS, FRONT),
    "pikku_mongo": (MONGO_LAYERS, MONGO_WINGS, {"__init__"}),
}


def _wing(module: str, package: str = "engine_core") -> str:
    _, wings, front = PACKAGES[package]
    if "." in module or module in wings:
        return module.split(".")[0]
    return "front" if module in front else "base"


def _module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package).with_suffix("").parts
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path, package: str) -> set[str]:
    """The modules of ``package`` that ``path`` imports (TYPE_CHECKING ones included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            if name == package:
                found.add("__init__")
            elif name.startswith(package + "."):
                rest = name[len(package) + 1 :]
                if (ROOT / package / (rest.replace(".", "/") + ".py")).exists() or (
                    ROOT / package / rest.replace(".", "/") / "__init__.py"
                ).exists():
                    found.add(rest)
    return found


@functools.cache
def _graph(package: str) -> dict[str, set[str]]:
    base = ROOT / package
    return {
        _module_name(path, base): _imports(path, package) - {_module_name(path, base)}
        for path in sorted(base.rglob("*.py"))
    }


@pytest.mark.parametrize("package", PACKAGES)
def test_every_module_has_a_layer(package: str) -> None:
    layers = PACKAGES[package][0]
    placed = set().union(*layers)
    assert set(_graph(package)) == placed
    assert sum(map(len, layers)) == len(placed)  # and only one


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_run_down_the_layers_only(package: str) -> None:
    layer_of = {name: i for i, layer in enumerate(PACKAGES[package][0]) for name in layer}
    upward = [
        f"{module} (layer {layer_of[module]}) imports {dep} (layer {layer_of[dep]})"
        for module, deps in _graph(package).items()
        for dep in deps
        if layer_of[dep] >= layer_of[module]
    ]
    assert upward == []


@pytest.mark.parametrize("package", PACKAGES)
def test_wings_import_one_way(package: str) -> None:
    rank = {wing: i for i, wing in enumerate(PACKAGES[package][1])}
    upward = sorted(
        f"{module} ({_wing(module, package)}) imports {dep} ({_wing(dep, package)})"
        for module, deps in _graph(package).items()
        for dep in deps
        if rank[_wing(dep, package)] > rank[_wing(module, package)]
    )
    assert upward == []


@pytest.mark.parametrize("package", PACKAGES)
def test_the_wing_graph_has_no_circle(package: str) -> None:
    edges = {
        (_wing(module, package), _wing(dep, package))
        for module, deps in _graph(package).items()
        for dep in deps
        if _wing(dep, package) != _wing(module, package)
    }
    assert all((b, a) not in edges for a, b in edges)


def test_pikku_mongo_layers_read_wing_by_wing() -> None:
    # Each layer holds modules of one wing, and the wings come in their order.
    rank = {wing: i for i, wing in enumerate(MONGO_WINGS)}
    wings = [{_wing(m, "pikku_mongo") for m in layer} for layer in MONGO_LAYERS]
    assert all(len(w) == 1 for w in wings)
    order = [rank[w.pop()] for w in wings]
    assert order == sorted(order)


def test_no_source_file_is_over_about_500_lines() -> None:
    # "About": a facade whose docstrings are most of it may run a few lines past.
    long = {
        str(path.relative_to(ROOT)): n
        for folder in ("engine_core", "pikku_mongo", "tests", "benchmarks", "scripts", "examples")
        for path in (ROOT / folder).rglob("*.py")
        if ".venv" not in path.parts and (n := len(path.read_text().splitlines())) > 530
    }
    assert long == {}


@functools.cache
def _functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    return [
        (f"{path.relative_to(ROOT)}:{node.lineno} {node.name}", node)
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]


def _complexity(function: ast.AST) -> int:
    """The cyclomatic complexity radon reports for ``function`` (its branches, loops,
    handlers, asserts, comprehensions and boolean operators), counted here so the test
    needs no radon."""
    count = 1
    for node in ast.walk(function):
        if isinstance(node, ast.If | ast.IfExp | ast.For | ast.AsyncFor | ast.While):
            count += 1
        elif isinstance(node, ast.ExceptHandler | ast.Assert | ast.match_case):
            count += 1
        elif isinstance(node, ast.comprehension):
            count += 1 + len(node.ifs)
        elif isinstance(node, ast.BoolOp):
            count += len(node.values) - 1
    return count


def test_no_function_is_over_60_lines() -> None:
    long = {
        where: n
        for where, node in _functions()
        if (n := (node.end_lineno or node.lineno) - node.lineno + 1) > 60
    }
    assert long == {}


def test_no_function_is_ranked_d_or_worse() -> None:
    # Radon's rank D begins at a complexity of 21. The conformance cases of
    # engine_core/testing are test code: a case may walk a long scenario.
    cases = "engine_core/testing/"
    complex_ = {
        where: n
        for where, node in _functions()
        if not where.startswith(cases) and (n := _complexity(node)) > 20
    }
    assert complex_ == {}


def test_only_the_package_front_reaches_the_engine() -> None:
    # Every other module works against the Runtime protocol; none can touch Engine.
    reach = {m for m, deps in _graph("engine_core").items() if "engine" in deps}
    assert reach == {"__init__"}


def test_engine_core_knows_nothing_of_mongodb() -> None:
    for path in (ROOT / "engine_core").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                )
                for name in names:
                    top = name.split(".")[0]
                    assert top not in {"pymongo", "bson", "motor", "pikku_mongo"}, path


def test_only_the_pydantic_ai_package_imports_the_ai_extra() -> None:
    # ``import engine_core`` works without pikku-mongo[ai]: pydantic-ai is imported only
    # by engine_core.pydantic_ai, which nothing else in engine_core imports.
    outside = []
    for path in (ROOT / "engine_core").rglob("*.py"):
        if "pydantic_ai" in path.relative_to(ROOT / "engine_core").parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                )
                if any(n.split(".")[0] == "pydantic_ai" or "pydantic_ai" in n for n in names):
                    outside.append(str(path.relative_to(ROOT)))
    assert outside == []
