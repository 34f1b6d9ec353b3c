"""The engine's metrics, through the OpenTelemetry metrics API only (docs/guides/observability.md).

Without an SDK configured nothing is recorded: every hook returns after one check of a
flag. No data point ever carries a run id (that would make one time series per run);
attributes are bounded sets: a workflow name, a status, a step's kind and outcome, a
queue, a store command.

The instruments come from the global ``MeterProvider`` (``set_meter_provider``) unless
:func:`use_meter_provider` gave one: the dashboard's ``/metrics`` and the tests use that
hook, since the global can be set only once per process.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime

from opentelemetry import metrics as otel
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
from opentelemetry.metrics import _internal as _otel_internal

#: Step attempts and waits: from 1 ms to 1 h.
STEP_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600)
#: Runs and their time in line: from 10 ms to a day.
RUN_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 86400)
#: A measured queue depth is reported for this many seconds, then dropped (the process
#: that measures it may have handed the job to another).
DEPTH_KEPT_S = 120.0


class Tally:
    """A counter kept here and reported to the SDK when it collects (an observable
    counter): adding is one dict update, where an SDK counter costs tens of
    microseconds per call."""

    def __init__(self) -> None:
        self.counts: dict[tuple[tuple[str, str], ...], int] = {}

    def add(self, n: int, attributes: tuple[tuple[str, str], ...] = ()) -> None:
        """Add ``n`` to the count of ``attributes``."""
        self.counts[attributes] = self.counts.get(attributes, 0) + n

    def observe(self, options: CallbackOptions) -> Iterable[Observation]:
        """The counts, for an observable gauge's callback."""
        for attributes, n in list(self.counts.items()):
            yield Observation(n, dict(attributes))


class Instruments:
    """The instruments listed in docs/guides/observability.md, from one meter; the
    counters are :class:`Tally`."""

    def __init__(self, provider: MeterProvider | None) -> None:
        meter = otel.get_meter("engine_core", meter_provider=provider)
        histogram = meter.create_histogram

        def counter(name: str, unit: str, description: str) -> Tally:
            tally = Tally()
            meter.create_observable_counter(name, [tally.observe], unit, description)
            return tally

        self.run_started = counter("pikku.run.started", "{run}", "Runs recorded")
        self.run_ended = counter("pikku.run.ended", "{run}", "Runs that ended, by status")
        self.run_duration = histogram(
            "pikku.run.duration",
            "s",
            "From a run's creation to its end",
            explicit_bucket_boundaries_advisory=RUN_BUCKETS,
        )
        self.run_queued = histogram(
            "pikku.run.queued_duration",
            "s",
            "From a run's creation (or the end of its delay) to its first pass",
            explicit_bucket_boundaries_advisory=RUN_BUCKETS,
        )
        self.step_duration = histogram(
            "pikku.step.duration",
            "s",
            "One step attempt, by kind and outcome",
            explicit_bucket_boundaries_advisory=STEP_BUCKETS,
        )
        self.schedule_to_start = histogram(
            "pikku.step.schedule_to_start",
            "s",
            "From a dispatched step attempt being due to a worker's claim",
            explicit_bucket_boundaries_advisory=STEP_BUCKETS,
        )
        self.step_attempts = counter("pikku.step.attempts", "{attempt}", "Step attempts")
        meter.create_observable_gauge(
            "pikku.worker.slots.used",
            [_observe_slots],
            "{slot}",
            "Step slots in use in this process (read at collection, no cost per step)",
        )
        self.store_commands = counter("pikku.store.commands", "{command}", "Store commands")
        self.recovered = counter("pikku.recovery.recovered", "{item}", "What recovery brought back")
        self.divergence = counter("pikku.pass.divergence", "{pass}", "Passes that diverged")
        meter.create_observable_gauge(
            "pikku.queue.depth",
            [_observe_depths],
            "{run}",
            "Runs waiting in each queue (measured by one process per recovery interval)",
        )


_provider: MeterProvider | None = None
_instruments: Instruments | None = None
_enabled: bool | None = None
_ENV_SET = "OTEL_PYTHON_METER_PROVIDER" in os.environ
#: queue -> (runs waiting, when measured: ``time.monotonic()``, real seconds: the SDK
#: reads the gauge in a thread of its own, where no engine's clock is at hand)
_depths: dict[str, tuple[int, float]] = {}
#: The serving engines' counts of step slots in use.
_slot_sources: list[Callable[[], int]] = []


def use_meter_provider(provider: MeterProvider | None) -> None:
    """Record the engine's metrics with ``provider`` (None: the global one again)."""
    global _provider, _instruments, _enabled
    _provider, _instruments, _enabled = provider, None, None
    _depths.clear()


def enabled() -> bool:
    """Whether an SDK would record anything (a provider was given or set globally).
    Runs several times per step: a few attribute reads (the environment is read once,
    at import, as OpenTelemetry reads it before a process starts)."""
    global _enabled
    if _enabled:
        return True
    if _provider is None and getattr(_otel_internal, "_METER_PROVIDER", None) is None:
        if not _ENV_SET:
            return False
    _enabled = True
    return True


def instruments() -> Instruments:
    """The engine's instruments, made on first use from the meter provider."""
    global _instruments
    if _instruments is None:
        _instruments = Instruments(_provider)
    return _instruments


def _seconds_since(moment: datetime | None, now: Callable[[], datetime]) -> float | None:
    if moment is None:
        return None
    return max(0.0, (now() - moment).total_seconds())


# ---- the hooks (each a no-op without an SDK) --------------------------------------


def run_started(workflow: str) -> None:
    """Count a run of ``workflow`` started."""
    if enabled():
        instruments().run_started.add(1, (("workflow", workflow),))


def run_ended(
    workflow: str, status: str, created_at: datetime | None, now: Callable[[], datetime]
) -> None:
    """Count a run of ``workflow`` ended with ``status``, and record how long it took
    (``now``: the engine's clock)."""
    if not enabled():
        return
    tools = instruments()
    tools.run_ended.add(1, (("status", status), ("workflow", workflow)))
    took = _seconds_since(created_at, now)
    if took is not None:
        tools.run_duration.record(took, {"workflow": workflow, "status": status})


def first_pass(
    workflow: str, queue: str | None, since: datetime | None, now: Callable[[], datetime]
) -> None:
    """Record how long a run of ``workflow`` (on ``queue``) waited for its first pass since
    ``since`` (``now``: the engine's clock)."""
    if not enabled():
        return
    took = _seconds_since(since, now)
    if took is not None:
        attributes = {"workflow": workflow, "queue": queue or ""}
        instruments().run_queued.record(took, attributes)


def attempt_ended(kind: str, outcome: str, seconds: float) -> None:
    """One step attempt ran: one ``step.attempts`` and one ``step.duration`` point."""
    if not enabled():
        return
    tools = instruments()
    tools.step_attempts.add(1, (("kind", kind), ("outcome", outcome)))
    tools.step_duration.record(seconds, {"kind": kind, "outcome": outcome})


def schedule_to_start(kind: str, seconds: float) -> None:
    """Record how long a step of ``kind`` waited between being due and starting."""
    if enabled():
        instruments().schedule_to_start.record(max(0.0, seconds), {"kind": kind})


def count_slots(used: Callable[[], int]) -> Callable[[], None]:
    """Report ``used()`` (a serving engine's step slots in use) in the slots gauge until
    the returned callable is called."""
    _slot_sources.append(used)

    def forget() -> None:
        if used in _slot_sources:
            _slot_sources.remove(used)

    return forget


def store_command(command: str) -> None:
    """Count a store command of the name ``command``."""
    if enabled():
        instruments().store_commands.add(1, (("command", command),))


def recovered(counts: Mapping[str, int]) -> None:
    """Count what one recovery pass did, by kind."""
    if not enabled():
        return
    counter = instruments().recovered
    for what, n in counts.items():
        if n:
            counter.add(n, (("what", what),))


def diverged(workflow: str) -> None:
    """Count a divergent pass of ``workflow``."""
    if enabled():
        instruments().divergence.add(1, (("workflow", workflow),))


async def measure_queues(
    names: Callable[[], Awaitable[list[str]]],
    count: Callable[[str], Awaitable[dict[str, int]]],
) -> None:
    """Measure every queue's depth (runs ``queued``) for the gauge: called by the one
    process that holds the recovery lease, once per recovery interval (1 + Q reads)."""
    if not enabled():
        return
    now = time.monotonic()
    for name in await names():
        _depths[name] = ((await count(name)).get("queued", 0), now)


def _observe_slots(options: CallbackOptions) -> Iterable[Observation]:
    yield Observation(sum(used() for used in list(_slot_sources)))


def _observe_depths(options: CallbackOptions) -> Iterable[Observation]:
    now = time.monotonic()
    for name, (depth, at) in list(_depths.items()):
        if now - at > DEPTH_KEPT_S:
            del _depths[name]
        else:
            yield Observation(depth, {"queue": name})
