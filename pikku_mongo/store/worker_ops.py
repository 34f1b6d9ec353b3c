"""``MongoStore``'s registry of serving engines: the ``workers`` collection.

One document per serving engine, ``_id`` = its instance id::

    {_id, host, pid, versions, workflows, step_functions, queues (JSON text each),
     started_us, last_seen_us, expires_us, concurrency, slots_used, clock_offset,
     pinned, workflow_versions, input_schemas (JSON text each)}

A serving engine writes its document once every few seconds (1 replace, upserting) and
deletes it when it stops; a crashed one's document stays until its ``expires_us``
passes and is then left out of every listing (and replaced if the id came back, which
it never does). Listing is 1 find of the collection (a fleet has few processes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import Any

from pymongo.asynchronous.collection import AsyncCollection

from engine_core.records import Worker, utcnow
from pikku_mongo.wire.checks import check_str
from pikku_mongo.wire.documents import Doc
from pikku_mongo.wire.encoding import dump_value, from_us, load_value, pack, to_us, unpack
from pikku_mongo.wire.retry import transient_retry

_BY_START = [("started_us", 1), ("_id", 1)]


def worker_to_doc(worker: Worker, clock_offset: float | None) -> Doc:
    """The document of ``worker`` (``clock_offset``: this host's, when the record has none)."""
    return {
        "_id": pack(check_str(worker.instance_id, "instance id")),
        "host": str(worker.host),
        "pid": int(worker.pid),
        "versions": dump_value(list(worker.versions)),
        "workflows": dump_value(list(worker.workflows)),
        "step_functions": dump_value(list(worker.step_functions)),
        "queues": dump_value(worker.queues),
        "started_us": to_us(worker.started_at),
        "last_seen_us": to_us(worker.last_seen),
        "expires_us": to_us(worker.expires_at),
        "concurrency": int(worker.concurrency),
        "slots_used": int(worker.slots_used),
        "clock_offset": worker.clock_offset if worker.clock_offset is not None else clock_offset,
        "pinned": bool(worker.pinned),
        "workflow_versions": dump_value(dict(worker.workflow_versions)),
        "input_schemas": dump_value(dict(worker.input_schemas)),
    }


def worker_from_doc(doc: Doc) -> Worker:
    """The worker record a document holds."""
    offset = doc.get("clock_offset")
    return Worker(
        instance_id=unpack(doc["_id"]),
        host=str(doc.get("host", "")),
        pid=int(doc.get("pid", 0)),
        versions=list(load_value(doc.get("versions")) or []),
        workflows=list(load_value(doc.get("workflows")) or []),
        step_functions=list(load_value(doc.get("step_functions")) or []),
        queues=dict(load_value(doc.get("queues")) or {}),
        started_at=from_us(doc["started_us"]),
        last_seen=from_us(doc["last_seen_us"]),
        expires_at=from_us(doc["expires_us"]),
        concurrency=int(doc.get("concurrency", 0)),
        slots_used=int(doc.get("slots_used", 0)),
        clock_offset=None if offset is None else float(offset),
        pinned=bool(doc.get("pinned", False)),
        workflow_versions=dict(load_value(doc.get("workflow_versions")) or {}),
        input_schemas=dict(load_value(doc.get("input_schemas")) or {}),
    )


@dataclass(eq=False)
class WorkerOps:
    """The worker-registry methods of :class:`~pikku_mongo.MongoStore`."""

    workers: AsyncCollection[Doc]
    _: KW_ONLY
    #: This host's clock against the server's (seconds), as the store measured it.
    clock_offset: Callable[[], float | None]

    @transient_retry
    async def put_worker(self, worker: Worker) -> None:
        """1 replace by ``_id``, upserting (idempotent)."""
        doc = worker_to_doc(worker, self.clock_offset())
        await self.workers.replace_one({"_id": doc["_id"]}, doc, upsert=True)

    @transient_retry
    async def delete_worker(self, instance_id: str) -> None:
        """1 delete by ``_id``."""
        await self.workers.delete_one({"_id": pack(check_str(instance_id, "instance id"))})

    @transient_retry
    async def list_workers(self) -> list[Worker]:
        """1 find of the records not yet expired, oldest first."""
        query: dict[str, Any] = {"expires_us": {"$gt": to_us(utcnow())}}
        docs = await self.workers.find(query, sort=_BY_START).to_list()
        return [worker_from_doc(doc) for doc in docs]
