"""The store conformance suite: every protocol method, and the races that matter."""

from __future__ import annotations

from engine_core.testing.event_lease_cases import EventLeaseCases
from engine_core.testing.flow_cases import FlowCases
from engine_core.testing.flow_key_cases import FlowKeyCases
from engine_core.testing.fork_cases import ForkCases
from engine_core.testing.operator_cases import OperatorCases
from engine_core.testing.replay_cases import ReplayRecordCases
from engine_core.testing.retention_cases import RetentionCases
from engine_core.testing.run_cases import RunCases
from engine_core.testing.schedule_cases import ScheduleCases
from engine_core.testing.step_cases import StepCases
from engine_core.testing.stream_cases import StreamCases
from engine_core.testing.talk_cases import TalkCases
from engine_core.testing.worker_cases import WorkerCases


class StoreConformance(
    RunCases,
    StepCases,
    EventLeaseCases,
    ScheduleCases,
    FlowCases,
    FlowKeyCases,
    WorkerCases,
    ReplayRecordCases,
    OperatorCases,
    ForkCases,
    StreamCases,
    TalkCases,
    RetentionCases,
):
    """What every :class:`~engine_core.store.Store` must do. Needs a ``store`` fixture
    that yields a fresh, initialised, empty store."""
