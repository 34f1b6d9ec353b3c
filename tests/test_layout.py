"""The architecture, pinned: engine_core's modules import one way, down a stated order of
layers; nothing below the engine can reach the ``Engine`` (so none touches its private
names); engine_core knows nothing of MongoDB; the public surfaces are exactly these."""

from __future__ import annotations

import ast
from pathlib import Path

import engine_core
import pikku_mongo

ROOT = Path(__file__).resolve().parents[1]

#: engine_core's modules, lowest layer first. A module may import only from layers
#: strictly below its own.
LAYERS: list[set[str]] = [
    {"errors", "records", "tasks", "tracing", "metrics"},
    {"streams"},
    {"memory.cloning", "run.results", "run.threads", "run.step_info", "convert", "lifecycle_log"},
    {"durations", "values", "options", "store", "mirror", "journal", "fleet.timers", "outages"},
    {
        "run.mismatch",
        "fleet.schemas",
        "run.keys",
        "run.journal_room",
        "periodic",
        "flow.queues",
        "schedules.times",
        "memory.flow",
        "memory.events",
        "memory.steps",
        "memory.workers",
        "memory.streams",
    },
    {"memory.store", "run.branches", "run.branch_order"},
    {
        "status",
        "fleet.waiters",
        "memory",
        "runtime",
        "run.context",
        "run.divergence",
        "run.transitions",
        "run.leases",
        "flow.queue_slots",
        "flow.starts",
        "fleet.registry",
    },
    {"testing.builders", "run.reentry", "run.streams", "run.signals", "run.body_hooks"},
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
        "testing.schedule_cases",
        "testing.worker_cases",
        "testing.replay_cases",
        "testing.operator_cases",
        "testing.fork_cases",
        "testing.stream_cases",
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
    {"run", "fleet", "flow", "schedules"},
    {"pydantic_ai.events"},
    {"pydantic_ai.units"},
    {"pydantic_ai.durability"},
    {"pydantic_ai"},
    {"host"},
    {"starting"},
    {"schedule_api", "repair_api"},
    {"engine"},
    {"__init__"},
]

#: engine_core's wings, lowest first: the modules at the top of the package that every
#: wing shares ("core"), the wings, then what faces the user ("front"). A module may
#: import from its own wing and the wings below it, never from one above.
WINGS: list[str] = [
    "core",
    "memory",
    "testing",
    "run",
    "fleet",
    "flow",
    "schedules",
    "pydantic_ai",
    "front",
]
FRONT = {"host", "starting", "schedule_api", "repair_api", "engine", "__init__"}


def _wing(module: str) -> str:
    if "." in module or module in WINGS:
        return module.split(".")[0]
    return "front" if module in FRONT else "core"


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


def _graph(package: str) -> dict[str, set[str]]:
    base = ROOT / package
    return {
        _module_name(path, base): _imports(path, package) - {_module_name(path, base)}
        for path in sorted(base.rglob("*.py"))
    }


def test_every_module_has_a_layer() -> None:
    placed = set().union(*LAYERS)
    assert set(_graph("engine_core")) == placed


def test_engine_core_imports_run_down_the_layers_only() -> None:
    layer_of = {name: i for i, layer in enumerate(LAYERS) for name in layer}
    upward = [
        f"{module} (layer {layer_of[module]}) imports {dep} (layer {layer_of[dep]})"
        for module, deps in _graph("engine_core").items()
        for dep in deps
        if layer_of[dep] >= layer_of[module]
    ]
    assert upward == []


def test_wings_import_one_way() -> None:
    rank = {wing: i for i, wing in enumerate(WINGS)}
    upward = sorted(
        f"{module} ({_wing(module)}) imports {dep} ({_wing(dep)})"
        for module, deps in _graph("engine_core").items()
        for dep in deps
        if rank[_wing(dep)] > rank[_wing(module)]
    )
    assert upward == []


def test_the_wing_graph_has_no_circle() -> None:
    edges = {
        (_wing(module), _wing(dep))
        for module, deps in _graph("engine_core").items()
        for dep in deps
        if _wing(dep) != _wing(module)
    }
    assert all((b, a) not in edges for a, b in edges)


def test_the_top_of_engine_core_holds_only_what_every_wing_shares_or_the_user_sees() -> None:
    top = {p.stem for p in (ROOT / "engine_core").glob("*.py")}
    assert top == FRONT | {
        "convert",
        "errors",
        "records",
        "tasks",
        "tracing",
        "durations",
        "values",
        "options",
        "store",
        "mirror",
        "journal",
        "outages",
        "lifecycle_log",
        "metrics",
        "streams",
        "periodic",
        "status",
        "runtime",
    }


def test_no_source_file_is_over_about_500_lines() -> None:
    # "About": a facade whose docstrings are most of it may run a few lines past.
    long = {
        str(path.relative_to(ROOT)): n
        for folder in ("engine_core", "pikku_mongo", "tests", "benchmarks", "scripts", "examples")
        for path in (ROOT / folder).rglob("*.py")
        if ".venv" not in path.parts and (n := len(path.read_text().splitlines())) > 530
    }
    assert long == {}


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


def test_the_public_surface_of_engine_core() -> None:
    assert sorted(engine_core.__all__) == [
        "BulkReport",
        "Divergence",
        "DuplicateRunError",
        "Engine",
        "EngineError",
        "ForkPlan",
        "InvalidDurationError",
        "InvalidInputError",
        "InvalidLimitError",
        "InvalidNameError",
        "InvalidOptionError",
        "InvalidRunIdError",
        "InvalidScheduleError",
        "NonDeterminismError",
        "NotSerializableError",
        "QueueNotDeclaredError",
        "QueueStatus",
        "RecoveryReport",
        "ReplayReport",
        "RunMirror",
        "RunNotActiveError",
        "RunNotFoundError",
        "RunStatus",
        "Schedule",
        "ScheduleNotFoundError",
        "StepFailedError",
        "StepInfo",
        "StepNotFoundError",
        "StepStatus",
        "Store",
        "StoreUnavailableError",
        "StreamClosedError",
        "StreamConflictError",
        "StreamEntry",
        "StreamTooLargeError",
        "TimelineEntry",
        "TraceIdFilter",
        "UNCHANGED",
        "Worker",
        "WorkflowContext",
        "WorkflowDeadlineExceededError",
        "WorkflowNotRegisteredError",
        "WorkflowRecovery",
        "WorkflowRunCancelledError",
        "WorkflowRunFailedError",
        "current_step",
    ]
    for name in engine_core.__all__:
        assert getattr(engine_core, name) is not None


def test_the_public_surface_of_pikku_mongo() -> None:
    assert sorted(pikku_mongo.__all__) == ["MissingDatabaseError", "MongoStore", "PikkuMongoError"]


def test_the_engine_exposes_no_mechanism_as_public_api() -> None:
    public = {n for c in engine_core.Engine.__mro__ for n in vars(c) if not n.startswith("_")}
    assert public == {
        "workflow",
        "step_function",
        "serving",
        "instance_id",
        "start",
        "send_event",
        "schedule",
        "trigger_schedule",
        "status",
        "history",
        "list_runs",
        "result",
        "cancel",
        "suspend",
        "resume",
        "retry",
        "delete_finished_runs",
        "recover",
        "drive",
        "create_schedule",
        "pause_schedule",
        "resume_schedule",
        "delete_schedule",
        "list_schedules",
        "count_runs",
        "list_workflows",
        "list_children",
        "list_workers",
        "queue",
        "list_queues",
        "replay_check",
        "fork",
        "list_forks",
        "fork_plan",
        "fork_many",
        "cancel_many",
        "retry_many",
        "read_stream",
    }
