"""The public surfaces, pinned: what users may import from each package (its names, the
modules at its top, what each wing's ``__init__`` exports) is exactly this; everything
else sits in a wing and is internal. ``MongoStore`` is built from its parts, and the
``Engine`` exposes no mechanism."""

from __future__ import annotations
import __future__

import importlib
import types

import engine_core
import pikku_mongo
from tests.test_layout import FRONT, PACKAGES, ROOT


def test_the_top_of_engine_core_holds_only_what_users_may_import() -> None:
    # Everything else is in a wing whose ``__init__`` exports nothing internal.
    top = {p.stem for p in (ROOT / "engine_core").glob("*.py")}
    assert top == FRONT | {
        "errors",
        "records",
        "streams",
        "mirror",
        "tracing",
        "metrics",
    }


def test_the_top_of_pikku_mongo_holds_only_its_front_and_errors() -> None:
    top = {p.stem for p in (ROOT / "pikku_mongo").glob("*.py")}
    assert top == {"__init__", "errors"}


def test_the_public_surface_of_engine_core() -> None:
    assert sorted(engine_core.__all__) == [
        "BulkReport",
        "CodecError",
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
        "UpdateAlreadyAnsweredError",
        "UpdateRejectedError",
        "UpdateRequest",
        "ValueTooLargeError",
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


#: What each wing's ``__init__`` exports: the public names that live in a wing; every
#: other module of a wing is internal (users import from the package or these).
WING_EXPORTS: dict[str, list[str]] = {
    "engine_core.store": [
        "EventStore",
        "FleetStore",
        "FlowKeyStore",
        "FlowStore",
        "RunStore",
        "StepStore",
        "Store",
        "StreamStore",
        "TalkStore",
        "TimeSource",
    ],
    "engine_core.common": [],
    "engine_core.codecs": ["AesGcmCodec", "PayloadCodec"],
    "engine_core.front": [],
    "engine_core.run": [],
    "engine_core.fleet": [],
    "engine_core.flow": [],
    "engine_core.schedules": [],
    "engine_core.memory": ["InMemoryStore"],
    "engine_core.testing": ["StoreConformance", "VirtualClock"],
    "engine_core.pydantic_ai": ["PikkuDurability"],
    "pikku_mongo.wire": ["CommandCounter", "OperationClock"],
    "pikku_mongo.writes": [],
    "pikku_mongo.store": ["MongoStore"],
    "pikku_mongo.doctor": ["Check", "DoctorReport", "diagnose", "render"],
    "pikku_mongo.dashboard": ["AuthCallable", "NAV", "NavItem", "dashboard_app"],
    "pikku_mongo.cli": ["main"],
}


def test_every_wing_exports_only_its_public_names() -> None:
    wings = {
        f"{package}.{path.parent.name}"
        for package in PACKAGES
        for path in (ROOT / package).glob("*/__init__.py")
    }
    assert wings == set(WING_EXPORTS)
    for wing, names in WING_EXPORTS.items():
        module = importlib.import_module(wing)
        # Its submodules are bound on it too once imported: those are not exports.
        defined = {
            n
            for n, value in vars(module).items()
            if not n.startswith("_")
            and not isinstance(value, types.ModuleType | __future__._Feature)
        }
        assert sorted(getattr(module, "__all__", [])) == sorted(names), wing
        assert defined == set(names), wing


def test_mongo_store_is_built_from_parts_not_mixins() -> None:
    from engine_core.store import Store
    from pikku_mongo.store.served import Served

    assert pikku_mongo.MongoStore.__bases__ == (object,)
    protocol = {
        n
        for part in Store.__mro__
        if part.__module__.startswith("engine_core.store")
        for n, value in vars(part).items()
        if not n.startswith("_") and callable(value)
    }
    served = {n for n, v in vars(pikku_mongo.MongoStore).items() if isinstance(v, Served)}
    # the store's own: its client, indexes, streams, and the real clock it follows
    own = {"init", "close", "job_hints", "follow_clock"}
    apart = {"offload_values", "fetch_values", "drop_values"}  # engine_core.codecs.apart
    assert protocol - own == served - {"journals_outcomes"} - apart
    assert own <= set(vars(pikku_mongo.MongoStore))


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
        "get_value",
        "update",
    }
