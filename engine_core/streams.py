"""Streams: ordered entries a run writes while it works (docs/guides/streams.md).

An entry is a record of its own in the store (never inside the run or a step), addressed
by (run id, stream key, position). Positions start at 0 and have no gaps. A workflow
body writes at positions it counts itself, so a replay writes each position once; a
step appends at the next free position and tags its entry with ``(step, attempt, n)``
so readers can drop the entries of a superseded attempt. A ``closed`` entry ends the
stream.

Limits (:class:`~engine_core.StreamTooLargeError` past them): a stream holds at most
:data:`STREAM_MAX_ENTRIES` entries, and one entry's value is at most
:data:`STREAM_MAX_ENTRY_BYTES` of JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engine_core.errors import StreamTooLargeError

#: The most entries one stream holds (its closing entry included).
STREAM_MAX_ENTRIES = 100_000
#: The most bytes of JSON one entry's value takes.
STREAM_MAX_ENTRY_BYTES = 256 * 1024


@dataclass(frozen=True)
class StreamEntry:
    """One entry of a run's stream. ``value`` is what was written (None on the closing
    entry); ``step``, ``attempt`` and ``n`` tag an entry a step wrote (its ``n``-th
    write, from 0, in that attempt); they are None for the workflow body's."""

    run_id: str
    key: str
    position: int
    value: Any
    written_at: datetime
    closed: bool = False
    step: str | None = None
    attempt: int | None = None
    n: int | None = None


def check_entry(run_id: str, key: str, position: int, value: Any) -> None:
    """Raise :class:`StreamTooLargeError` when an entry at ``position`` with ``value``
    would pass a limit."""
    if position >= STREAM_MAX_ENTRIES:
        raise StreamTooLargeError(
            f"stream {key!r} of run {run_id!r} is full: a stream holds at most "
            f"{STREAM_MAX_ENTRIES} entries; write further entries to another stream"
        )
    size = len(json.dumps(value, separators=(",", ":")))
    if size > STREAM_MAX_ENTRY_BYTES:
        raise StreamTooLargeError(
            f"an entry of stream {key!r} of run {run_id!r} takes {size} bytes of JSON; "
            f"an entry takes at most {STREAM_MAX_ENTRY_BYTES}: split it into several"
        )
