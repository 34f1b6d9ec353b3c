"""Parsing the durations users write: seconds, or strings such as "500ms", "2s", "5m", "1h"."""

from __future__ import annotations

import math
import re

from engine_core.errors import InvalidDurationError

Duration = float | int | str

_UNITS = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 7 * 86400.0,
    "y": 365 * 86400.0,
}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w|y)\s*$")


#: The longest duration the engine takes (a time that far ahead still fits a datetime).
MAX_DURATION_S = 100 * 365 * 86400.0


def parse_duration(value: object, *, what: str = "duration") -> float:
    """Return ``value`` in seconds, or raise :class:`InvalidDurationError`."""
    if isinstance(value, bool):
        raise InvalidDurationError(f"{what} must be seconds or a string like '2s', not {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        match = _PATTERN.match(value)
        if match is None:
            raise InvalidDurationError(
                f"{what} {value!r} is not a duration: use seconds (a number) or a string "
                "such as '500ms', '2s', '5m', '1h', '1d', '2w' or '1y'"
            )
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    else:
        raise InvalidDurationError(
            f"{what} must be seconds or a duration string, not {type(value).__name__}"
        )
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidDurationError(f"{what} must be a finite, non-negative duration, not {value!r}")
    if seconds > MAX_DURATION_S:
        raise InvalidDurationError(
            f"{what} {value!r} is longer than 100 years; use a shorter duration"
        )
    return seconds


def check_retention(retention: Duration | None) -> float | None:
    """A ``retention`` as seconds (None: runs are kept for ever): a duration longer than
    zero, else :class:`~engine_core.InvalidDurationError` (a ``ValueError``)."""
    if retention is None:
        return None
    seconds = parse_duration(retention, what="retention")
    if seconds <= 0:
        raise InvalidDurationError(f"retention must be longer than zero, not {retention!r}")
    return seconds


EXPONENTIAL = "exponential"
EXPONENTIAL_BASE_S = 1.0
EXPONENTIAL_CAP_S = 300.0


def check_retry_delay(value: object) -> float | str:
    """Validate a ``retry_delay``: seconds, a duration string, or ``"exponential"``."""
    if value == EXPONENTIAL:
        return EXPONENTIAL
    return parse_duration(value, what="retry_delay")


def retry_delay_seconds(delay: float | str, failed_attempt: int, rand: float) -> float:
    """The wait after ``failed_attempt`` (1-based) failed; ``rand`` in [0, 1) is the jitter."""
    if delay == EXPONENTIAL:
        ceiling: float = min(EXPONENTIAL_CAP_S, EXPONENTIAL_BASE_S * 2.0 ** (failed_attempt - 1))
        return ceiling * rand  # full jitter
    return float(delay)
