"""``MongoStore``'s streams (docs/guides/streams.md): collections ``streams`` and ``heartbeats``.

A stream entry is a document of its own, ``_id`` = packed run id, key and a zero-padded
position (so one stream's entries are one ``_id`` range, in order), with ``run_id`` (the
shard key of a per-run collection, named in every filter), ``key``, ``pos``, the value
as JSON text, ``closed`` (0/1), the step tag (``step``, ``attempt``, ``n``), the write
time in microseconds and an insert id. Entries are inserted through the group commit
(:class:`~pikku_mongo.writes.batcher.Batcher`), so concurrent writers share commands.

A heartbeat is one document per step, ``_id`` as the step's, replaced by each beat of
the same or a later attempt.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from pymongo import ASCENDING, DESCENDING
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import PyMongoError

from engine_core.streams import StreamEntry
from pikku_mongo.wire.causal import CausalReads
from pikku_mongo.wire.checks import check_int, check_str
from pikku_mongo.wire.documents import Doc, step_doc_id
from pikku_mongo.wire.encoding import (
    ID_SEPARATOR,
    dump_value,
    from_us,
    load_value,
    pack,
    to_us,
    unpack,
)
from pikku_mongo.wire.filters import eq
from pikku_mongo.wire.retry import surface_oversize, transient_retry
from pikku_mongo.wire.watch import inserts
from pikku_mongo.writes.batcher import Batcher

log = logging.getLogger("pikku_mongo.store.stream_ops")

_POS_DIGITS = 10
_BY_ID = [("_id", ASCENDING)]
_LAST = [("_id", DESCENDING)]


def _stream_prefix(run_id: str, key: str) -> str:
    return (
        pack(check_str(run_id, "run id"))
        + ID_SEPARATOR
        + pack(check_str(key, "stream key"))
        + ID_SEPARATOR
    )


def entry_to_doc(entry: StreamEntry) -> Doc:
    """The document of the stream entry ``entry`` (its fields checked)."""
    position = check_int(entry.position, "stream position")
    return {
        "_id": _stream_prefix(entry.run_id, entry.key) + f"{position:0{_POS_DIGITS}d}",
        "run_id": pack(entry.run_id),
        "key": pack(entry.key),
        "pos": position,
        "value": dump_value(entry.value),
        "closed": 1 if entry.closed else 0,
        "step": None if entry.step is None else pack(entry.step),
        "attempt": entry.attempt,
        "n": entry.n,
        "at": to_us(entry.written_at),
    }


def entry_from_doc(doc: Doc) -> StreamEntry:
    """The stream entry a document holds."""
    step = doc.get("step")
    return StreamEntry(
        run_id=unpack(doc["run_id"]),
        key=unpack(doc["key"]),
        position=int(doc["pos"]),
        value=load_value(doc.get("value")),
        written_at=from_us(doc["at"]),
        closed=doc.get("closed") in (1, True),
        step=None if step is None else unpack(step),
        attempt=doc.get("attempt"),
        n=doc.get("n"),
    )


@dataclass(eq=False, kw_only=True)
class StreamOps:
    """The stream and heartbeat methods of :class:`~pikku_mongo.MongoStore`."""

    streams: AsyncCollection[Doc]
    heartbeats: AsyncCollection[Doc]
    stream_writes: Batcher
    reads: CausalReads
    watch: bool

    @surface_oversize
    async def append_stream(self, entry: StreamEntry) -> StreamEntry | None:
        """1 insert, group-committed (the ``_id`` decides); when the position is taken,
        1 find of the entry there. The insert id lets a repeat after a lost reply know
        its own first try."""
        doc = entry_to_doc(entry)
        doc["ins"] = nonce = uuid.uuid4().hex
        key = {"_id": doc["_id"], "run_id": eq(doc["run_id"])}

        async def confirm() -> bool:
            found = await self.reads.read_one(self.streams, {**key, "ins": eq(nonce)}, {"_id": 1})
            return found is not None

        if await self.stream_writes.insert(doc, confirm):
            return None
        return await self._entry_at(key)

    @transient_retry
    async def _entry_at(self, key: Doc) -> StreamEntry | None:
        found = await self.reads.read_one(self.streams, key)
        return None if found is None else entry_from_doc(found)

    @transient_retry
    async def stream_entries(
        self, run_id: str, key: str, *, offset: int, limit: int
    ) -> list[StreamEntry]:
        """1 find on an ``_id`` range (plus a getMore per further batch)."""
        if check_int(limit, "limit") <= 0:
            return []
        prefix = _stream_prefix(run_id, key)
        start = prefix + f"{max(check_int(offset, 'offset'), 0):0{_POS_DIGITS}d}"
        query = {"_id": {"$gte": start, "$lt": prefix + "\x7f"}, "run_id": eq(pack(run_id))}
        docs = await self.streams.find(query).sort(_BY_ID).limit(limit).to_list()
        return [entry_from_doc(doc) for doc in docs]

    @transient_retry
    async def stream_length(self, run_id: str, key: str) -> int:
        """1 find of the last entry of the ``_id`` range."""
        prefix = _stream_prefix(run_id, key)
        query = {"_id": {"$gte": prefix, "$lt": prefix + "\x7f"}, "run_id": eq(pack(run_id))}
        last = await self.streams.find_one(query, {"pos": 1}, sort=_LAST)
        return 0 if last is None else int(last["pos"]) + 1

    @transient_retry
    async def list_streams(self, run_id: str) -> list[str]:
        """1 distinct on ``key`` among the run's entries (the ``run_id`` index)."""
        keys = await self.streams.distinct("key", {"run_id": eq(pack(check_str(run_id, "run id")))})
        return sorted(unpack(k) for k in keys if isinstance(k, str))

    def stream_hints(self, run_id: str) -> AsyncIterator[None] | None:
        """A change stream of the run's stream inserts; ends at once on a server without
        change streams (readers then poll)."""
        return (
            _entry_inserts(self.streams, pack(check_str(run_id, "run id"))) if self.watch else None
        )

    @transient_retry
    async def put_heartbeat(self, run_id: str, key: str, *, attempt: int, details: Any) -> None:
        """1 update (an upsert guarded by attempt; a later attempt's beat is kept)."""
        doc_id = step_doc_id(run_id, key)
        check_int(attempt, "attempt")
        change = {"$set": {"attempt": attempt, "details": dump_value(details)}}
        query = {"_id": doc_id, "run_id": eq(pack(run_id))}
        result = await self.heartbeats.update_one({**query, "attempt": {"$lte": attempt}}, change)
        if result.matched_count == 0:
            try:
                await self.heartbeats.insert_one(
                    {
                        "_id": doc_id,
                        "run_id": pack(run_id),
                        "attempt": attempt,
                        "details": dump_value(details),
                    }
                )
            except PyMongoError as exc:
                if "E11000" not in str(exc) and getattr(exc, "code", None) != 11000:
                    raise
                # Inserted meanwhile: keep the later attempt's.
                await self.heartbeats.update_one({**query, "attempt": {"$lte": attempt}}, change)

    @transient_retry
    async def get_heartbeat(self, run_id: str, key: str) -> tuple[int, Any] | None:
        """1 find by ``_id``."""
        doc = await self.heartbeats.find_one(
            {"_id": step_doc_id(run_id, key), "run_id": eq(pack(run_id))}
        )
        return None if doc is None else (int(doc["attempt"]), load_value(doc.get("details")))


def _entry_inserts(streams: AsyncCollection[Doc], run_id: str) -> AsyncIterator[None]:
    """Yield once per insert (or batch of them) of one run's entries until the server
    refuses change streams; reopened after a broken stream."""
    pipeline = [
        {"$match": {"operationType": {"$eq": "insert"}, "fullDocument.run_id": {"$eq": run_id}}}
    ]
    return inserts(streams, pipeline, "stream change stream", None)
