"""engine_core: a storage-agnostic durable workflow engine for asyncio.

What users may import: the names below (``__all__``); ``engine_core.memory``
(``InMemoryStore``) and ``engine_core.testing`` (``StoreConformance``); and, to write a
store or read what one holds, the modules at the top of the package: ``errors``,
``records``, ``store``, ``streams``, ``mirror``, ``tracing`` and ``metrics``. Everything
in the wings (``common/``, ``run/``, ``fleet/``, ``flow/``, ``schedules/``, ``front/``)
is internal and may change without notice.
"""

from engine_core.common.status import (
    Divergence,
    ForkPlan,
    QueueStatus,
    ReplayReport,
    RunStatus,
    StepStatus,
    TimelineEntry,
)
from engine_core.engine import Engine
from engine_core.errors import (
    CodecError,
    DuplicateRunError,
    EngineError,
    InvalidDurationError,
    InvalidInputError,
    InvalidLimitError,
    InvalidNameError,
    InvalidOptionError,
    InvalidRunIdError,
    InvalidScheduleError,
    NonDeterminismError,
    NotSerializableError,
    QueueNotDeclaredError,
    RunNotActiveError,
    RunNotFoundError,
    ScheduleNotFoundError,
    StepFailedError,
    StepNotFoundError,
    StoreUnavailableError,
    StreamClosedError,
    StreamConflictError,
    StreamTooLargeError,
    UpdateAlreadyAnsweredError,
    UpdateRejectedError,
    ValueTooLargeError,
    WorkflowDeadlineExceededError,
    WorkflowNotRegisteredError,
    WorkflowRunCancelledError,
    WorkflowRunFailedError,
)
from engine_core.fleet.recovery import RecoveryReport, WorkflowRecovery
from engine_core.mirror import RunMirror
from engine_core.records import Worker
from engine_core.run.bulk import BulkReport
from engine_core.run.context import WorkflowContext
from engine_core.run.fork import UNCHANGED
from engine_core.run.step_info import StepInfo, current_step
from engine_core.run.update_request import UpdateRequest
from engine_core.schedules.times import Schedule
from engine_core.store import Store
from engine_core.streams import StreamEntry
from engine_core.tracing import TraceIdFilter

__all__ = [
    "UNCHANGED",
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
