"""Type checks on everything that reaches a query.

Defence in depth: the engine validates ids and names already, but a store must never
let a value such as ``{"$ne": 1}`` become a query operator, so every id, key, name and
number that goes into a filter is checked here first and rejected with ``TypeError``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any


def check_str(value: object, what: str) -> str:
    """``value``, which must be a str (``TypeError`` naming ``what`` otherwise)."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__} ({value!r:.80})")
    return value


def check_opt_str(value: object, what: str) -> str | None:
    """``value``, which must be None or a str."""
    return None if value is None else check_str(value, what)


def check_strs(values: Iterable[object], what: str) -> list[str]:
    """``values`` as a list, each of which must be a str (a single str is refused)."""
    if isinstance(values, str | bytes):
        raise TypeError(f"{what} must be a sequence of str, not a single {type(values).__name__}")
    return [check_str(v, what) for v in values]


def check_int(value: object, what: str) -> int:
    """``value``, which must be an int (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__} ({value!r:.80})")
    return value


def check_seconds(value: object, what: str) -> float:
    """``value`` as float seconds; it must be an int or a float (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} must be a number of seconds, not {type(value).__name__}")
    return float(value)


def check_datetime(value: object, what: str) -> datetime:
    """``value``, which must be a datetime."""
    if not isinstance(value, datetime):
        raise TypeError(f"{what} must be a datetime, not {type(value).__name__}")
    return value


def check_opt_datetime(value: object, what: str) -> datetime | None:
    """:func:`check_datetime`, None kept."""
    return None if value is None else check_datetime(value, what)


def check_bool(value: Any, what: str) -> bool:
    """``value``, which must be a bool."""
    if not isinstance(value, bool):
        raise TypeError(f"{what} must be a bool, not {type(value).__name__}")
    return value
