"""Checking what crosses a checkpoint: ids, names and stored values."""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from datetime import datetime
from typing import Any

from engine_core.common.convert import to_json
from engine_core.errors import (
    InvalidLimitError,
    InvalidNameError,
    InvalidRunIdError,
    NotSerializableError,
    ValueTooLargeError,
)

MAX_RUN_ID_LENGTH = 200
MAX_NAME_LENGTH = 500
_INT64 = 2**63
# Leaves room under MongoDB's 16 MiB document limit for the rest of the document: the
# largest value of a store that does not say (``max_value_bytes``) what it keeps.
MAX_VALUE_BYTES = 15 * 1024 * 1024


def value_limit(store: object) -> int:
    """The largest value (characters of JSON) ``store`` keeps: its ``max_value_bytes``
    (MongoStore's ``max_value``; values past its documents' room go elsewhere), else
    :data:`MAX_VALUE_BYTES`."""
    limit = getattr(store, "max_value_bytes", None)
    return limit if isinstance(limit, int) else MAX_VALUE_BYTES


def record_limit(store: object) -> int | None:
    """What values kept in one record together may take (see :func:`check_fits`), or
    None when ``store`` keeps large values outside its records (it says its
    ``max_value_bytes``)."""
    return None if isinstance(getattr(store, "max_value_bytes", None), int) else MAX_VALUE_BYTES


def check_run_id(run_id: object) -> str:
    """A run id is a non-empty string of at most 200 characters, compared as it is."""
    if not isinstance(run_id, str):
        raise InvalidRunIdError(
            f"run id must be a string, not {type(run_id).__name__} ({run_id!r:.80})"
        )
    if not run_id or len(run_id) > MAX_RUN_ID_LENGTH:
        raise InvalidRunIdError(
            f"run id must be 1 to {MAX_RUN_ID_LENGTH} characters long, got {len(run_id)}"
        )
    return run_id


def check_name(name: object, what: str) -> str:
    """Step, event and workflow names are non-empty strings."""
    if not isinstance(name, str):
        raise InvalidNameError(f"{what} must be a string, not {type(name).__name__}")
    if not name or len(name) > MAX_NAME_LENGTH or "\x00" in name:
        raise InvalidNameError(
            f"{what} must be 1 to {MAX_NAME_LENGTH} characters with no NUL, got {name!r:.80}"
        )
    return name


def check_retries(retries: object) -> int:
    """A step's ``retries`` is a non-negative integer."""
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"retries must be a non-negative integer, not {retries!r}")
    return retries


def _check(value: Any, path: str) -> None:
    if value is None or isinstance(value, str | bool):
        return
    if isinstance(value, int):
        if not -_INT64 <= value < _INT64:
            raise NotSerializableError(f"{path}: integer {value} does not fit in 64 bits")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotSerializableError(f"{path}: {value} is not a finite number")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise NotSerializableError(
                    f"{path}: dict key {key!r} is {type(key).__name__}; keys must be strings"
                )
            _check(item, f"{path}[{key!r}]")
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check(item, f"{path}[{index}]")
        return
    raise NotSerializableError(
        f"{path}: a value of type {type(value).__name__} cannot be checkpointed; "
        "use dicts, lists, strings, numbers, booleans and None"
    )


_SCALARS = frozenset({bool, int, float, str})


def to_stored(value: Any, what: str, limit: int = MAX_VALUE_BYTES) -> Any:
    """Return a fresh JSON-shaped copy of ``value`` or raise :class:`NotSerializableError`
    (:class:`ValueTooLargeError` for one past ``limit`` characters of JSON: see
    :func:`value_limit`).

    ``what`` names the value in the message (for example ``"result of step 'charge'"``).
    The copy keeps a caller's later mutation from changing what was checkpointed, and
    makes every store hand back the same shapes (tuples come back as lists).
    """
    if value is None or type(value) in _SCALARS:
        _check(value, what)  # a scalar is its own copy; no JSON round trip needed
        if type(value) is not str or len(value) <= limit // 6:
            return value
    converted = False
    try:
        try:
            _check(value, what)
        except NotSerializableError:
            # Not plain JSON: models, dataclasses, datetimes... become JSON (see convert),
            # built afresh: no copy needed.
            value, converted = to_json(value), True
            _check(value, what)
        text = json.dumps(value)
    except RecursionError:
        raise NotSerializableError(
            f"{what} is nested too deeply to checkpoint; flatten it"
        ) from None
    if len(text) > limit:
        raise ValueTooLargeError(
            f"{what} is {len(text)} bytes as JSON, over the store's limit of {limit} bytes "
            "for one value (MongoStore(max_value=...), 256 MiB by default; 15 MiB for a "
            "store that does not say); store large data elsewhere and checkpoint a "
            "reference to it"
        )
    return value if converted else json.loads(text)


def stored_size(*values: Any) -> int:
    """About how many characters ``values`` take as JSON (cheap for scalars)."""
    size = 0
    for value in values:
        if value is None or isinstance(value, bool | int | float):
            size += 8
        elif isinstance(value, str):
            size += len(value) + 2
        else:
            size += len(json.dumps(value))
    return size


#: About what a reference to a value a store keeps apart takes in its record.
_REFERENCE_SIZE = 128


def held_size(store: object, *values: Any) -> int:
    """About how many characters ``values`` take in ``store``'s record: as
    :func:`stored_size`, but a value past the store's ``offload_over_bytes`` (kept
    apart, referenced from the record) as a reference."""
    over = getattr(store, "offload_over_bytes", None)
    if not isinstance(over, int):
        return stored_size(*values)
    sizes = [stored_size(v) for v in values]
    return sum(_REFERENCE_SIZE if size > over else size for size in sizes)


_URL_NAMESPACE = uuid.NAMESPACE_URL.bytes


def check_fits(what: str, *values: Any, limit: int | None = MAX_VALUE_BYTES) -> None:
    """Values kept in one stored record together (a run's input and output, a job's
    payload and result) must fit it together (``limit``, see :func:`record_limit`; None:
    the store keeps large values apart): :class:`ValueTooLargeError` if not."""
    if limit is None:
        return
    total = stored_size(*values)
    if total > limit:
        raise ValueTooLargeError(
            f"{what} is {total} bytes as JSON with what is stored beside it, over the "
            f"{limit} byte limit of one record; store large data elsewhere and "
            "checkpoint a reference to it"
        )


def idempotency_key(run_id: str, step: str) -> str:
    """The stable key of a step: the same across attempts, processes and stores (the
    UUIDv5 of ``json.dumps([run_id, step])`` in the URL namespace, computed directly:
    this runs for every attempt)."""
    name = json.dumps([run_id, step]).encode("utf-8", "surrogatepass")
    digest = bytearray(hashlib.sha1(_URL_NAMESPACE + name).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def check_page(limit: object, after: object, most: int) -> None:
    """A page of a listing: ``limit`` from 1 to ``most``, ``after`` None or a run id."""
    if after is not None:
        check_run_id(after)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= most:
        raise InvalidLimitError(f"limit must be an integer from 1 to {most}, not {limit!r}")


def check_prefix(prefix: object) -> str | None:
    """A run id prefix: plain characters (never a pattern); empty means none."""
    if prefix is None:
        return None
    if not isinstance(prefix, str) or len(prefix) > MAX_RUN_ID_LENGTH:
        raise InvalidRunIdError(
            f"a run id prefix is a string of at most {MAX_RUN_ID_LENGTH} characters"
        )
    return prefix or None


def check_moment(moment: object, what: str) -> None:
    """A bound of a time range is a timezone-aware datetime (or None)."""
    if moment is not None and (not isinstance(moment, datetime) or moment.tzinfo is None):
        raise ValueError(f"{what} must be a timezone-aware datetime, not {moment!r}")
