"""When schedules fire: checking a schedule's timing, and the time math of its fires.

A schedule fires either by a cron expression, read in its time zone (``cronsim``, with
Debian cron's handling of daylight saving changes), or ``every`` N seconds, at the
multiples of N since the Unix epoch (so every process computes the same fires, and a
time zone does not move them). All times here are timezone-aware; results are in UTC.

The fires of a cron schedule are defined by forward iteration (:func:`next_fire`); the
reverse iteration cronsim offers is only a hint for :func:`latest_fire`, which checks
it forward, so the two always agree: there is no fire strictly between
``latest_fire(s, t)`` and ``next_fire(s, t)``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from engine_core.common.durations import parse_duration
from engine_core.errors import InvalidDurationError, InvalidScheduleError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)
_ONE_S = timedelta(seconds=1)
#: The longest cron expression taken (a sane one is a few dozen characters).
MAX_CRON_LENGTH = 200
#: Results of one cronsim iteration looked at before giving up (a fold of a daylight
#: saving change can make a few of them fall at or before the moment asked about).
_MAX_STEPS = 10_000


@dataclass(frozen=True)
class ScheduleSpec:
    """A checked schedule timing: exactly one of ``cron`` and ``every`` (whole seconds)."""

    cron: str | None
    every: float | None
    timezone: str

    @property
    def zone(self) -> ZoneInfo:
        """The schedule's time zone."""
        return ZoneInfo(self.timezone)


def make_spec(cron: object = None, every: object = None, timezone: object = "UTC") -> ScheduleSpec:
    """Check a schedule's timing; :class:`InvalidScheduleError` when it is unusable: a
    bad cron expression, an unknown time zone, neither or both of ``cron`` and
    ``every``, or an ``every`` that is not a positive whole number of seconds."""
    if (cron is None) == (every is None):
        raise InvalidScheduleError("a schedule needs exactly one of cron= and every=")
    if not isinstance(timezone, str) or not timezone:
        raise InvalidScheduleError(f"timezone must be a time zone name, not {timezone!r:.80}")
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidScheduleError(f"unknown time zone {timezone!r:.80}") from None
    if every is not None:
        try:
            seconds = parse_duration(every, what="every")
        except InvalidDurationError as exc:
            raise InvalidScheduleError(str(exc)) from None
        if seconds < 1 or not float(seconds).is_integer():
            raise InvalidScheduleError(
                f"every must be a whole number of seconds, at least 1 s, not {every!r}"
            )
        return ScheduleSpec(cron=None, every=float(seconds), timezone=timezone)
    if not isinstance(cron, str) or not cron.strip() or len(cron) > MAX_CRON_LENGTH:
        raise InvalidScheduleError(
            f"cron must be a cron expression of at most {MAX_CRON_LENGTH} characters, "
            f"not {cron!r:.80}"
        )
    expression = " ".join(cron.split())
    try:
        # From any moment: whether it fires at all does not depend on when one asks.
        next(CronSim(expression, _EPOCH.astimezone(zone)))
    except (CronSimError, ValueError, StopIteration) as exc:
        reason = str(exc) or "it never fires"
        raise InvalidScheduleError(f"bad cron expression {cron!r:.80}: {reason}") from None
    return ScheduleSpec(cron=expression, every=None, timezone=timezone)


def _us(moment: datetime) -> int:
    return (moment - _EPOCH) // _ONE_US


def _from_us(value: int) -> datetime:
    return _EPOCH + timedelta(microseconds=value)


def _aware(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        raise ValueError(f"a schedule's time must be timezone-aware, not {moment!r}")
    return moment


def next_fire(spec: ScheduleSpec, after: datetime) -> datetime:
    """The first fire strictly after ``after``, in UTC."""
    after = _aware(after)
    if spec.every is not None:
        step = round(spec.every * 1_000_000)
        return _from_us((_us(after) // step + 1) * step)
    assert spec.cron is not None
    fires = CronSim(spec.cron, after.astimezone(spec.zone))
    for _ in range(_MAX_STEPS):
        fire = next(fires).astimezone(UTC)
        if fire > after:
            return fire
    raise InvalidScheduleError(f"cron {spec.cron!r} has no fire after {after.isoformat()}")


def latest_fire(spec: ScheduleSpec, at: datetime) -> datetime | None:
    """The last fire at or before ``at``, in UTC; None when there is none (within the
    50 years cronsim looks back)."""
    at = _aware(at)
    if spec.every is not None:
        step = round(spec.every * 1_000_000)
        return _from_us(_us(at) // step * step)
    assert spec.cron is not None
    probe = at.astimezone(UTC).replace(microsecond=0) + _ONE_S
    for _ in range(8):
        try:
            hint = next(CronSim(spec.cron, probe.astimezone(spec.zone), reverse=True))
        except StopIteration:
            return None
        hint = hint.astimezone(UTC)
        # The forward fire at (or just after) the hint, then forward while the next one
        # is still not after ``at``; a hint the forward fires skip (the fold of a
        # daylight saving change) sends the search further back.
        fire = next_fire(spec, hint - _ONE_S)
        if fire <= at:
            while (later := next_fire(spec, fire)) <= at:
                fire = later
            return fire
        probe = hint - _ONE_S
    return None


def fire_run_id(name: str, fire: datetime) -> str:
    """The run id of a schedule's fire: ``name@2026-12-03T01:00:00Z`` (UTC, seconds)."""
    return f"{name}@{_aware(fire).astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}"


def trigger_run_id(name: str) -> str:
    """The run id of a fire asked for now (``trigger_schedule``): ``name@manual-`` and
    13 random hex digits, as long as a fire's, and never a fire's (no date)."""
    return f"{name}@manual-{uuid.uuid4().hex[:13]}"


#: How much longer than its name a schedule's run ids are.
RUN_ID_SUFFIX_LENGTH = len(fire_run_id("", _EPOCH))


def describe(spec: ScheduleSpec) -> str:
    """``cron 0 3 * * *`` or ``every 30s``, for listings."""
    if spec.cron is not None:
        return f"cron {spec.cron}"
    assert spec.every is not None
    return f"every {spec.every:g}s"


@dataclass(frozen=True)
class Schedule:
    """A stored schedule, as ``Engine.list_schedules`` returns it. ``every`` is in
    seconds; ``next_fire_at`` is a UTC datetime (for a paused schedule, when it was
    next due as it was paused)."""

    name: str
    workflow: str
    cron: str | None
    every: float | None
    timezone: str
    input: Any
    paused: bool
    next_fire_at: datetime
    #: What the fires missed while nothing ran start: "latest", "none" or "all".
    catch_up: str = "latest"
