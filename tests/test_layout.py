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
    {"errors", "records", "tasks", "tracing"},
    {"cloning", "results"},
    {"durations", "values", "store", "mirror", "journal", "timers", "outages"},
    {"keys", "queues", "schedule_times", "memory_flow", "memory_events"},
    {
        "status",
        "waiters",
        "memory",
        "runtime",
        "context",
        "transitions",
        "leases",
        "queue_slots",
        "starts",
    },
    {"testing.builders"},
    {
        "attempt",
        "control",
        "queue_figures",
        "testing.run_cases",
        "testing.step_cases",
        "testing.event_lease_cases",
        "testing.flow_cases",
        "testing.schedule_cases",
    },
    {"testing.conformance"},
    {"testing"},
    {"pass_state"},
    {"inline", "waits"},
    {"run_pass"},
    {"driver", "worker", "recovery", "admission", "run_timers", "scheduler"},
    {"schedule_control"},
    {"host"},
    {"engine"},
    {"__init__"},
]


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


def test_the_public_surface_of_engine_core() -> None:
    assert sorted(engine_core.__all__) == [
        "DuplicateRunError",
        "Engine",
        "EngineError",
        "InvalidDurationError",
        "InvalidLimitError",
        "InvalidNameError",
        "InvalidRunIdError",
        "InvalidScheduleError",
        "NotSerializableError",
        "QueueNotDeclaredError",
        "QueueStatus",
        "RecoveryReport",
        "RunMirror",
        "RunNotFoundError",
        "RunStatus",
        "Schedule",
        "ScheduleNotFoundError",
        "StepFailedError",
        "StepInfo",
        "StepStatus",
        "Store",
        "StoreUnavailableError",
        "TimelineEntry",
        "TraceIdFilter",
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
    public = {n for n in vars(engine_core.Engine) if not n.startswith("_")}
    assert public == {
        "workflow",
        "step_function",
        "serving",
        "instance_id",
        "start",
        "send_event",
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
        "queue",
        "list_queues",
    }
