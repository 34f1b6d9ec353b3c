"""Queues as declared with ``engine.queue``: their limits, checked at the call."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from engine_core.common.durations import parse_duration
from engine_core.common.values import check_name
from engine_core.errors import InvalidLimitError, QueueNotDeclaredError

_RATE = re.compile(r"^\s*(\d+)\s*/\s*(.+?)\s*$")
#: Priorities are integers in this range (stores order them exactly).
MAX_PRIORITY = 10**15


@dataclass(frozen=True)
class Rate:
    """At most ``count`` admissions in any window of ``per`` seconds."""

    count: int
    per: float


@dataclass(frozen=True)
class QueueLimits:
    """A declared queue: every limit None means no limit."""

    name: str
    concurrency: int | None = None
    worker_concurrency: int | None = None
    key_concurrency: int | None = None
    rate: Rate | None = None

    @property
    def tracks_holders(self) -> bool:
        """Whether admission must know which runs hold slots (a fleet-wide limit)."""
        return self.concurrency is not None or self.key_concurrency is not None

    @property
    def unlimited(self) -> bool:
        """No fleet-wide limit: every run in line may be admitted at once."""
        return not self.tracks_holders and self.rate is None


def parse_rate(rate: object) -> Rate:
    """``"N/period"`` (``"100/1m"``, ``"5/s"``, ``"10/30s"``) as a :class:`Rate`."""
    match = _RATE.match(rate) if isinstance(rate, str) else None
    if match is None:
        raise InvalidLimitError(
            f"rate must be a string 'N/period' such as '100/1m' or '5/s', not {rate!r}"
        )
    count, period = int(match.group(1)), match.group(2)
    if period in ("ms", "s", "m", "h", "d"):
        period = "1" + period
    per = parse_duration(period, what="rate period")
    if count < 1 or per <= 0:
        raise InvalidLimitError(f"rate {rate!r} must allow at least 1 run per non-zero period")
    return Rate(count, per)


def _limit(value: object, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidLimitError(f"{what} must be a positive integer or None, not {value!r}")
    return value


def declare(
    name: str,
    *,
    concurrency: object = None,
    worker_concurrency: object = None,
    key_concurrency: object = None,
    rate: object = None,
) -> QueueLimits:
    """The limits of a queue declaration, checked."""
    return QueueLimits(
        name=check_name(name, "queue name"),
        concurrency=_limit(concurrency, "concurrency"),
        worker_concurrency=_limit(worker_concurrency, "worker_concurrency"),
        key_concurrency=_limit(key_concurrency, "key_concurrency"),
        rate=parse_rate(rate) if rate is not None else None,
    )


def add_queue(queues: dict[str, QueueLimits], limits: QueueLimits) -> None:
    """Declare a queue; declaring it again is fine only with the same limits."""
    known = queues.get(limits.name)
    if known is not None and known != limits:
        raise ValueError(f"queue {limits.name!r} is already declared with other limits")
    queues[limits.name] = limits


def declared(queues: Mapping[str, QueueLimits], name: object) -> QueueLimits:
    """The declared queue ``name``, or :class:`QueueNotDeclaredError`."""
    limits = queues.get(name) if isinstance(name, str) else None
    if limits is None:
        raise QueueNotDeclaredError(
            f"queue {name!r} is not declared on this engine (declared: "
            f"{sorted(queues) or 'none'}) nor by any process of the fleet (no limits "
            f"stored, no live worker declares it); call engine.queue({name!r}, ...) in "
            "the processes that drive its runs"
        )
    return limits


def check_priority(priority: object) -> int:
    """A priority is an integer; smaller runs first."""
    if isinstance(priority, bool) or not isinstance(priority, int) or abs(priority) > MAX_PRIORITY:
        raise InvalidLimitError(
            f"priority must be an integer from -{MAX_PRIORITY} to {MAX_PRIORITY}, not {priority!r}"
        )
    return priority
