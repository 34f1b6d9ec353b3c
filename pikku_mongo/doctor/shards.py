"""``doctor``'s sharding checks and ``pikku-mongo shard-plan`` (docs/guides/sharding.md).

* ``storage format``: the database is at this version's format (the migration that moves
  the dedup guarantee off its unique index must run before sharding);
* ``unique indexes``: no unique index on a collection that is (or will be) sharded
  unless its shard key prefixes it: MongoDB refuses to shard past one;
* ``shard keys``: on a sharded cluster, each collection's shard key as ``config.collections``
  records it (where the user's role may read it) against :data:`SHARD_KEYS`, the field
  the store's single-document filters carry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pymongo.errors import OperationFailure

from pikku_mongo.doctor.report import Check
from pikku_mongo.wire.documents import FORMAT
from pikku_mongo.wire.server import short_reason
from pikku_mongo.wire.shard_keys import SHARD_KEYS, UNSHARDED, shard_commands

if TYPE_CHECKING:
    from pikku_mongo.store.mongo_store import MongoStore

Doc = dict[str, Any]


async def shard_checks(store: MongoStore, topology: str) -> list[Check]:
    """The three checks of the module docstring (each a ``fail`` naming the error when
    it cannot run)."""
    checks = []
    for name, check in (
        ("storage format", _format),
        ("unique indexes", _unique_indexes),
    ):
        try:
            checks.append(await check(store))
        except Exception as exc:
            checks.append(Check(name, "fail", f"could not check: {short_reason(exc)}"))
    try:
        checks.append(await _shard_keys(store, topology))
    except Exception as exc:
        checks.append(Check("shard keys", "fail", f"could not check: {short_reason(exc)}"))
    return checks


async def _format(store: MongoStore) -> Check:
    stored = await store.meta.find_one({"_id": "format"})
    version = int(stored["version"]) if stored is not None else 0
    data = {"format": version, "expected": FORMAT}
    if version < FORMAT:
        return Check(
            "storage format",
            "fail",
            f"format {version}, this version needs {FORMAT}: run pikku-mongo init (and "
            "before sharding: the migration drops an index that blocks it)",
            data,
        )
    return Check("storage format", "ok", f"format {version}", data)


def blocking_indexes(collection: str, key: str, indexes: Iterable[Mapping[str, Any]]) -> list[str]:
    """The unique indexes of ``collection`` (other than ``_id``'s) that a shard key on
    ``key`` would not prefix: each blocks sharding it."""
    found = []
    for index in indexes:
        fields = list(dict(index.get("key") or {}))
        if index.get("unique") and fields != ["_id"] and fields[:1] != [key]:
            found.append(f"{collection}({', '.join(fields)}) unique")
    return found


async def _unique_indexes(store: MongoStore) -> Check:
    blocking: list[str] = []
    for name, key in SHARD_KEYS.items():
        collection = store.database.get_collection(store.prefix + name)
        cursor = await collection.list_indexes()
        blocking += blocking_indexes(collection.name, key, [dict(ix) async for ix in cursor])
    if blocking:
        return Check(
            "unique indexes",
            "fail",
            f"{', '.join(blocking)}: a unique index the shard key does not prefix blocks "
            "sharding; run pikku-mongo init (the migration drops the store's own)",
            {"blocking": blocking},
        )
    return Check("unique indexes", "ok", "none blocks sharding", {"blocking": []})


def judge_shard_keys(database: str, prefix: str, sharded: Iterable[Mapping[str, Any]]) -> Check:
    """The ``shard keys`` check from the ``config.collections`` documents of the store's
    collections (``{_id: "<db>.<collection>", key: {...}}``; a document marked
    ``dropped`` is not sharded)."""
    keys = {
        str(doc["_id"]): dict(doc.get("key") or {}) for doc in sharded if not doc.get("dropped")
    }
    wrong: list[str] = []
    shown: dict[str, Any] = {}
    for name in (*SHARD_KEYS, *UNSHARDED):
        full = f"{database}.{prefix}{name}"
        if full not in keys:
            continue
        key = keys[full]
        shown[prefix + name] = key
        want = SHARD_KEYS.get(name, "_id")
        if list(key) != [want]:
            wrong.append(f"{prefix}{name} on {key} (its writes carry {want!r})")
    data = {"shard_keys": shown}
    if wrong:
        return Check(
            "shard keys",
            "fail",
            f"{'; '.join(wrong)}: single-document writes would be refused or scattered; "
            "reshard as pikku-mongo shard-plan prints",
            data,
        )
    if not shown:
        return Check(
            "shard keys",
            "warn",
            "sharded cluster, but none of the store's collections is sharded: every one "
            "lives on its primary shard; see pikku-mongo shard-plan",
            data,
        )
    return Check("shard keys", "ok", f"{len(shown)} sharded as the store expects", data)


async def _shard_keys(store: MongoStore, topology: str) -> Check:
    if topology != "sharded":
        return Check("shard keys", "ok", "not sharded: nothing to check", {"shard_keys": None})
    names = [f"{store.database.name}.{store.prefix}{n}" for n in (*SHARD_KEYS, *UNSHARDED)]
    config = store.database.client.get_database("config").get_collection("collections")
    try:
        docs = await config.find({"_id": {"$in": names}}).to_list()
    except OperationFailure as exc:
        return Check(
            "shard keys",
            "warn",
            f"cannot read config.collections ({short_reason(exc)}): shard keys unchecked; "
            "grant clusterMonitor, or compare with pikku-mongo shard-plan",
            {"shard_keys": None},
        )
    return judge_shard_keys(store.database.name, store.prefix, docs)


def shard_plan(database: str, prefix: str) -> str:
    """The commands an administrator runs on a mongos to shard a store's collections."""
    lines = [
        "// pikku-mongo shard plan: run on a mongos as a cluster administrator.",
        "// First: pikku-mongo init with this version (the storage format migration drops",
        "// the unique index that would make MongoDB refuse to shard the runs collection).",
    ]
    for command in shard_commands(database, prefix):
        field = next(iter(command["key"]))
        lines.append(
            f'db.adminCommand({{ shardCollection: "{command["shardCollection"]}", '
            f'key: {{ {field}: "hashed" }} }})'
        )
    unsharded = ", ".join(prefix + n for n in UNSHARDED)
    lines.append(f"// Leave unsharded: {unsharded}.")
    return "\n".join(lines)
