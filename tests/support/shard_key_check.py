"""The check that every single-document write or upsert on a sharded collection names
its shard key by equality (see :mod:`pikku_mongo.wire.shard_keys`).

No sharded server runs here, so the tests watch a client's commands instead:
:class:`ShardKeyListener` records each write that MongoDB would refuse (or scatter) on
a sharded cluster.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pymongo import monitoring

from pikku_mongo.wire.documents import Doc
from pikku_mongo.wire.encoding import pack
from pikku_mongo.wire.shard_keys import SHARD_KEYS


def run_filter(run_id: str) -> Doc:
    """The filter of one run document (its ``_id`` is its shard key)."""
    return {"_id": pack(run_id)}


def _is_equality(condition: Any) -> bool:
    if isinstance(condition, dict):
        return set(condition) == {"$eq"}
    return not isinstance(condition, list)


def _field_of(collection: str, prefix: str) -> str | None:
    if not collection.startswith(prefix):
        return None
    return SHARD_KEYS.get(collection[len(prefix) :])


def _single_commands(command: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each op of a client-level ``bulkWrite`` as the collection-level command it would
    be (each op names its namespace)."""
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
        yield name, single


def missing_shard_keys(command_name: str, command: Mapping[str, Any], prefix: str) -> Iterator[str]:
    """Why each single-document write or upsert of ``command`` lacks its collection's
    shard key (nothing for a collection that is not sharded, or for a multi-document
    write, which MongoDB broadcasts anyway)."""
    if command_name == "bulkWrite":
        for name, single in _single_commands(command):
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
