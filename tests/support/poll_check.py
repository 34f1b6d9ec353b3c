"""The check that polls read sharded collections by shard key only (targeted polling).

A worker polls for due jobs and an admitter reads its queue's line at every turn of
every process; on a sharded cluster (docs/guides/sharding.md) a read of a sharded collection that
names no shard key by equality (or ``$in`` of values: mongos targets each) goes to
every shard each time. Recovery sweeps may (one process at a time, under the recovery
lease). No sharded server runs here, so the tests mark the store methods a poll calls
(:func:`polling`) and a :class:`PollListener` records each read such a method sends to
a sharded collection without its shard key.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from pymongo import monitoring

from pikku_mongo.wire.shard_keys import SHARD_KEYS

#: The poll whose commands are being sent (a store method's name), else None.
POLL: ContextVar[str | None] = ContextVar("pikku_poll", default=None)
_READS = ("find", "aggregate", "count", "distinct")


@contextmanager
def polling(name: str) -> Iterator[None]:
    """Mark the commands sent within as those of the poll ``name``."""
    token = POLL.set(name)
    try:
        yield
    finally:
        POLL.reset(token)


def _targeted(condition: Any) -> bool:
    if isinstance(condition, dict):
        if set(condition) == {"$eq"}:
            return True
        values = condition.get("$in") if set(condition) == {"$in"} else None
        return isinstance(values, list) and not any(isinstance(v, dict) for v in values)
    return condition is not None and not isinstance(condition, list)


def untargeted_read(command_name: str, command: Mapping[str, Any], prefix: str) -> str | None:
    """Why ``command`` is a read of a sharded collection that goes to every shard, or
    None (a write, an unsharded collection, a read by shard key)."""
    if command_name not in _READS:
        return None
    collection = command.get(command_name)
    if not isinstance(collection, str) or not collection.startswith(prefix):
        return None
    key = SHARD_KEYS.get(collection[len(prefix) :])
    if key is None:
        return None
    query: Any = command.get("filter" if command_name == "find" else "query") or {}
    if command_name == "aggregate":
        first = (command.get("pipeline") or [{}])[0]
        query = first.get("$match", {}) if isinstance(first, dict) else {}
    if isinstance(query, dict) and _targeted(query.get(key)):
        return None
    return f"{command_name} on {collection}: filter {query!r} names no {key!r} by equality"


class PollListener(monitoring.CommandListener):
    """Records each read of a sharded collection without its shard key that a poll
    (:func:`polling`) sends; ``polled`` counts the commands polls sent."""

    def __init__(self, prefix: str = "pikku_") -> None:
        self.prefix = prefix
        self.violations: list[str] = []
        self.polled = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        poll = POLL.get()
        if poll is None:
            return
        self.polled += 1
        reason = untargeted_read(event.command_name, event.command, self.prefix)
        if reason is not None:
            self.violations.append(f"{poll}: {reason}")

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass
