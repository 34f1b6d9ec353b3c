"""``MongoStore``'s operations on the ``queue_limits`` collection: the limits each
queue was declared with (``engine.queue``), so that any process (the CLI, a dashboard
that declared nothing) shows them.

One document per queue, ``_id`` = the packed queue name::

    {_id, concurrency, worker_concurrency, key_concurrency, rate, key_rate, fairness}

(each an int, or the rates a string such as ``"100/60s"``, or null for no limit;
``fairness`` ``"key"`` or null; a field the declaring version did not know is absent). A
fleet has few queues; each method says what it costs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pymongo.asynchronous.collection import AsyncCollection

from pikku_mongo.wire.checks import check_str
from pikku_mongo.wire.documents import Doc
from pikku_mongo.wire.encoding import pack, unpack
from pikku_mongo.wire.retry import transient_retry

_FIELDS = ("concurrency", "worker_concurrency", "key_concurrency", "rate", "key_rate", "fairness")


@dataclass(eq=False)
class DeclaredOps:
    """Declared queue limits (see the module docstring)."""

    queue_limits: AsyncCollection[Doc]

    @transient_retry
    async def put_queue_limits(self, name: str, limits: dict[str, Any]) -> None:
        """1 replace, upserting."""
        queue_id = pack(check_str(name, "queue name"))
        # The _id in the document too: not every server takes it from the filter.
        doc = {"_id": queue_id, **{f: limits[f] for f in _FIELDS if f in limits}}
        await self.queue_limits.replace_one({"_id": queue_id}, doc, upsert=True)

    @transient_retry
    async def list_queue_limits(self) -> dict[str, dict[str, Any]]:
        """1 find of every document."""
        docs = await self.queue_limits.find({}).to_list()
        return {unpack(d["_id"]): {f: d[f] for f in _FIELDS if f in d} for d in docs}
