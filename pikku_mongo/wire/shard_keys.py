"""The shard key of each collection, and the filters that carry it.

On a sharded cluster (docs/guides/sharding.md) ``runs``, ``dedup``, ``qkeys`` and
``debounce`` are sharded on ``{_id: "hashed"}``, ``steps``, ``events``, ``streams``,
``heartbeats``, ``values`` and ``updates`` on ``{run_id: "hashed"}``; ``leases``,
``queues``, ``queue_limits``, ``schedules``, ``workers``, ``forks`` (markers of forks
being made), ``meta``, and the job and line indexes of targeted polling (``jobs``,
``lines``: read at every poll, they must stay on one shard) stay unsharded. A
single-document write (an update or delete of one document, a findAndModify) and every
upsert must then name the full shard key by equality, or MongoDB refuses it (or, before
7.1, scatters it): so every such filter of the store carries it (:func:`step_filter`
builds a step's), and the tests watch a client's commands for one that does not (the
conformance run does, on every server, so a regression fails them).
"""

from __future__ import annotations

from collections.abc import Iterable

from pikku_mongo.wire.checks import check_str
from pikku_mongo.wire.documents import Doc, step_doc_id
from pikku_mongo.wire.encoding import pack

#: Collection (without the store's prefix) -> its shard key's one field (hashed).
SHARD_KEYS: dict[str, str] = {
    "runs": "_id",
    "steps": "run_id",
    "events": "run_id",
    "streams": "run_id",
    "heartbeats": "run_id",
    "values": "run_id",
    "updates": "run_id",
    "dedup": "_id",
    "qkeys": "_id",
    "debounce": "_id",
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


def step_filter(run_id: str, key: str) -> Doc:
    """The filter of one step document: its ``_id`` and its run id (the shard key), so a
    write (and a guarded upsert's collision) goes to the one shard that owns it."""
    return {"_id": step_doc_id(run_id, key), "run_id": {"$eq": pack(run_id)}}


def item_filter(run_id: str, name: str, what: str) -> Doc:
    """The filter of a run's document named ``name`` (a ``what``: a value's key, an
    update's id): its ``_id``, made as a step's, and its run id (the shard key)."""
    return {"_id": step_doc_id(run_id, check_str(name, what)), "run_id": {"$eq": pack(run_id)}}


def shard_commands(database: str, prefix: str) -> Iterable[Doc]:
    """The ``shardCollection`` commands (run against ``admin`` on a mongos) that shard
    a store's collections as :data:`SHARD_KEYS` says."""
    for name, key in SHARD_KEYS.items():
        yield {"shardCollection": f"{database}.{prefix}{name}", "key": {key: "hashed"}}
