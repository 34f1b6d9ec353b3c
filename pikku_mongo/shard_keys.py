"""The shard key of each collection, the filters that carry it, and the check that they do.

On a sharded cluster (docs/guides/sharding.md) ``runs`` and ``dedup`` are sharded on
``{_id: "hashed"}``, ``steps``, ``events``, ``streams`` and ``heartbeats`` on
``{run_id: "hashed"}``; ``leases``,
``queues``, ``queue_limits``, ``schedules``, ``workers``, ``forks`` (markers of forks
being made), ``meta``, and the job and line indexes of targeted polling (``jobs``,
``lines``: read at every poll, they must stay on one shard) stay unsharded. A
single-document write (an update or delete of one document, a findAndModify) and every
upsert must then name the full shard key by equality, or MongoDB refuses it (or, before
7.1, scatters it): so every such filter of the store is built here, by
:func:`run_filter` and :func:`step_filter`, and :class:`ShardKeyListener` watches a
client's commands for one that does not carry its key (the conformance run does, on
every server, so a regression fails the tests).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from pymongo import monitoring

from pikku_mongo.checks import check_str
from pikku_mongo.documents import Doc, step_doc_id
from pikku_mongo.encoding import pack

#: Collection (without the store's prefix) -> its shard key's one field (hashed).
SHARD_KEYS: dict[str, str] = {
    "runs": "_id",
    "steps": "run_id",
    "events": "run_id",
    "streams": "run_id",
    "heartbeats": "run_id",
    "dedup": "_id",
}
#: The collections that stay unsharded (small, or read and written store-wide).
UNSHARDED = (
    "leases",
    "queues",
    "queue_limits",
    "schedules",
    "workers",
    "forks",
    "meta",
    "jobs",
    "lines",
)


def run_filter(run_id: str) -> Doc:
    """The filter of one run document (its ``_id`` is its shard key)."""
    return {"_id": pack(check_str(run_id, "run id"))}


def step_filter(run_id: str, key: str) -> Doc:
    """The filter of one step document: its ``_id`` and its run id (the shard key), so a
    write (and a guarded upsert's collision) goes to the one shard that owns it."""
    return {"_id": step_doc_id(run_id, key), "run_id": {"$eq": pack(run_id)}}


def _is_equality(condition: Any) -> bool:
    if isinstance(condition, dict):
        return set(condition) == {"$eq"}
    return not isinstance(condition, list)


def _field_of(collection: str, prefix: str) -> str | None:
    if not collection.startswith(prefix):
        return None
    return SHARD_KEYS.get(collection[len(prefix) :])


def missing_shard_keys(command_name: str, command: Mapping[str, Any], prefix: str) -> Iterator[str]:
    """Why each single-document write or upsert of ``command`` lacks its collection's
    shard key (nothing for a collection that is not sharded, or for a multi-document
    write, which MongoDB broadcasts anyway)."""
    if command_name == "bulkWrite":  # client-level: each op names its namespace
        spaces = [str(ns.get("ns", "")).partition(".")[2] for ns in command.get("nsInfo", ())]
        for op in command.get("ops", ()):
            name = next(n for n in ("insert", "update", "delete") if n in op)
            single: dict[str, Any] = {name: spaces[op[name]]}
            if name == "insert":
                single["documents"] = [op["document"]]
            elif name == "update":
                single["updates"] = [
                    {"q": op.get("filter", {}), "multi": op.get("multi", False),
                     "upsert": op.get("upsert", False)}
                ]  # fmt: skip
            else:
                limit = 0 if op.get("multi") else 1
                single["deletes"] = [{"q": op.get("filter", {}), "limit": limit}]
            yield from missing_shard_keys(name, single, prefix)
        return
    collection = command.get(command_name)
    if not isinstance(collection, str):
        return
    key = _field_of(collection, prefix)
    if key is None:
        return
    where = f"{command_name} on {collection}"
    if command_name == "insert":
        for doc in command.get("documents", ()):
            if key not in doc:
                yield f"{where}: a document without its shard key {key!r}"
    elif command_name == "update":
        for update in command.get("updates", ()):
            if (not update.get("multi") or update.get("upsert")) and not _is_equality(
                update.get("q", {}).get(key, [])
            ):
                yield f"{where}: filter {update.get('q')!r} names no {key!r} by equality"
    elif command_name == "delete":
        for delete in command.get("deletes", ()):
            if delete.get("limit") == 1 and not _is_equality(delete.get("q", {}).get(key, [])):
                yield f"{where}: filter {delete.get('q')!r} names no {key!r} by equality"
    elif command_name.lower() == "findandmodify":
        if not _is_equality(command.get("query", {}).get(key, [])):
            yield f"{where}: filter {command.get('query')!r} names no {key!r} by equality"


class ShardKeyListener(monitoring.CommandListener):
    """A command listener recording every single-document write or upsert on a sharded
    collection of a store (collections named ``prefix`` + name) whose filter does not
    carry the collection's shard key (see :func:`missing_shard_keys`)."""

    def __init__(self, prefix: str = "pikku_") -> None:
        self.prefix = prefix
        self.violations: list[str] = []
        self.checked = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        found = list(missing_shard_keys(event.command_name, event.command, self.prefix))
        self.checked += 1
        self.violations += found

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def shard_commands(database: str, prefix: str) -> Iterable[Doc]:
    """The ``shardCollection`` commands (run against ``admin`` on a mongos) that shard
    a store's collections as :data:`SHARD_KEYS` says."""
    for name, key in SHARD_KEYS.items():
        yield {"shardCollection": f"{database}.{prefix}{name}", "key": {key: "hashed"}}
