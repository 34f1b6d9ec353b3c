"""Parsing the sizes users write: bytes (an integer), or strings such as "512KiB",
"1MiB", "256MB" (KB, MB, GB are powers of 1000; KiB, MiB, GiB of 1024)."""

from __future__ import annotations

import re

from engine_core.errors import InvalidOptionError

_UNITS = {
    "b": 1,
    "kb": 1000,
    "kib": 1024,
    "mb": 1000**2,
    "mib": 1024**2,
    "gb": 1000**3,
    "gib": 1024**3,
}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_size(value: object, *, what: str = "size") -> int:
    """``value`` in bytes, or :class:`~engine_core.InvalidOptionError` (a
    ``ValueError``) naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidOptionError(
            f"{what} must be a number of bytes or a size like '1MiB', not {value!r}"
        )
    if isinstance(value, int):
        size = value
    else:
        match = _PATTERN.match(value)
        unit = _UNITS.get((match.group(2) or "b").lower()) if match else None
        if match is None or unit is None:
            raise InvalidOptionError(
                f"{what} {value!r} is not a size: use bytes (an integer) or a string such "
                "as '512KiB', '1MiB' or '256MB'"
            )
        size = int(float(match.group(1)) * unit)
    if size <= 0:
        raise InvalidOptionError(f"{what} must be larger than zero, not {value!r}")
    return size
