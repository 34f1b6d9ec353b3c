"""Group commit: the writes that one process makes to a collection at once share commands.

Writes wait in a queue; while one bulk write is in flight the next batch forms, so a
single writer pays one round trip per write and many concurrent writers (passes,
workers, starts) pay one round trip per batch. Batches are unordered bulk writes, and
each write learns its own outcome:

* an insert that collides with an existing ``_id`` reports a duplicate-key error of its
  own;
* a guarded update is sent as an upsert on its ``_id``: when its guard fails, the
  document that exists with that ``_id`` makes the upsert collide, and the collision is
  that operation's own duplicate-key error. (When no document has the ``_id`` at all,
  the upsert creates one; it is reported as a failed guard and deleted again at once.)

A batch of one is sent as the plain command (cheaper, and no upsert is needed to learn
whether the guard held).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from pymongo import InsertOne, UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import BulkWriteError, DocumentTooLarge, DuplicateKeyError, OperationFailure

from pikku_mongo.wire.documents import Doc
from pikku_mongo.wire.retry import is_transient, retrying, unavailable
from pikku_mongo.writes.queued import (
    DUPLICATE_KEY,
    Confirm,
    Kind,
    Outcome,
    QueuedWrite,
    failure_of,
    only_duplicates,
)
from pikku_mongo.writes.riding import NotServed, send_riding

log = logging.getLogger("pikku_mongo.writes.batcher")

#: At most this many writes in one bulk (well under the server's 100,000 and 48 MB).
MAX_BATCH = 1000
#: How many turns of the event loop a riding write waits for a batch to ride on.
RIDE_TURNS = 4
#: The writes that may ride a run write: inserts (stream entries) and upserts (values).
_RIDING = ("insert", "upsert")
#: At most this many writes ride one batch (a body's next few; a long burst goes in
#: plain bulk inserts of its own, which servers apply faster than a mixed bulkWrite).
MAX_RIDERS = 32


class Batcher:
    """Group commit for one collection (see the module docstring).

    ``scratch`` matches a document that only a guarded upsert can have created (one with
    none of the fields every real document has), so it can be deleted."""

    def __init__(
        self,
        collection: AsyncCollection[Doc],
        scratch: Doc,
        *,
        ride_on: Batcher | None = None,
        beside: AsyncCollection[Doc] | None = None,
    ) -> None:
        self.collection = collection
        self._scratch = scratch
        #: Where the ``beside`` writes of a guarded write go.
        self._beside = beside
        self._queue: list[QueuedWrite] = []
        self._task: asyncio.Task[None] | None = None
        #: Commands sent and writes they carried, for tests and benchmarks.
        self.commands = 0
        self.writes = 0
        # Riding (pikku_mongo.writes.riding): this batcher's inserts wait a few turns for the
        # next batch of ``ride_on``, which takes them into its own command.
        self._ride_on = ride_on
        self._riders: list[Batcher] = []
        self._riding_served = True
        self._namespace: str | None = None
        if ride_on is not None:
            ride_on._riders.append(self)
            self._namespace = collection.full_name

    def insert(self, doc: Doc, confirm: Confirm | None = None) -> asyncio.Future[bool]:
        """Insert ``doc``; False when a document with its ``_id`` exists. An insert sent
        again after a lost reply may collide with its own first try: ``confirm()`` then
        tells whether the document that exists is this one."""
        return self._submit("insert", doc, {}, confirm)

    def update(self, filter: Doc, update: Doc) -> asyncio.Future[bool]:
        """Apply ``update`` to the document ``filter`` matches, if any (nothing learnt)."""
        return self._submit("update", filter, update)

    def guarded(
        self,
        filter: Doc,
        update: Doc,
        confirm: Confirm | None = None,
        *,
        beside: Sequence[tuple[Doc, Doc]] = (),
        fallback: Doc | None = None,
    ) -> asyncio.Future[bool]:
        """Apply ``update`` to the document matching ``filter`` (which names its
        ``_id``); whether one matched. A write sent again after a lost reply may find its
        own first try already applied and its guard failed: ``confirm()`` then tells
        whether the write is in the document. ``beside``: upserts of documents of the
        ``beside`` collection that land in the same command only if this write does;
        on a server without client-level ``bulkWrite`` (:attr:`beside_served` false)
        ``fallback`` is sent instead, alone."""
        future = self._submit("guarded", filter, update, confirm)
        if beside:
            write = self._queue[-1]
            write.beside, write.fallback = beside, fallback
        return future

    @property
    def beside_served(self) -> bool:
        """Whether a guarded write's ``beside`` writes go in its command: true until the
        server is found to serve no client-level ``bulkWrite``. A write that has settled
        was sent as this says now (it changes once, before anything is applied)."""
        return self._riding_served and self._beside is not None

    def upsert(self, filter: Doc, update: Doc) -> asyncio.Future[bool]:
        """Apply ``update`` to the document matching ``filter`` (which names its
        ``_id``), creating it if no document has that ``_id``; False when one exists
        but fails the rest of ``filter``."""
        return self._submit("upsert", filter, update)

    # The methods above hand back the write's future itself (no coroutine around it): a
    # caller awaits it, or gathers many without wrapping each in a task.
    def _submit(
        self, kind: Kind, filter: Doc, update: Doc, confirm: Confirm | None = None
    ) -> asyncio.Future[bool]:
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._queue.append(
            QueuedWrite(kind, filter, update, future, confirm, namespace=self._namespace)
        )
        if self._task is None:
            # Started on the next turn of the loop: writes submitted meanwhile join it.
            ride = self._ride_on is not None and self._ride_on._riding_served
            self._task = asyncio.ensure_future(self._drain_later() if ride else self._drain())
        return future

    # ---- riding (see pikku_mongo.writes.riding) ------------------------------------------

    async def _drain_later(self) -> None:
        """Give the batcher ridden on a few turns to take the queue; send what is left."""
        for _ in range(RIDE_TURNS):
            await asyncio.sleep(0)
        await self._drain()

    def _take_riders(self) -> list[QueuedWrite]:
        if not self._riders or not self._riding_served:
            return []
        taken: list[QueuedWrite] = []
        for rider in self._riders:
            room = MAX_RIDERS - len(taken)
            mine = [w for w in rider._queue if w.kind in _RIDING and not w.sent][:room]
            if mine:
                chosen = set(map(id, mine))
                rider._queue = [w for w in rider._queue if id(w) not in chosen]
                taken += mine
        return taken

    def _give_back(self, riders: Sequence[QueuedWrite]) -> None:
        for rider in self._riders:
            back = [w for w in riders if w.namespace == rider._namespace and not w.future.done()]
            if back:
                rider._queue[:0] = back
                if rider._task is None:
                    rider._task = asyncio.ensure_future(rider._drain())

    async def _send_riding(
        self, batch: Sequence[QueuedWrite], riders: Sequence[QueuedWrite]
    ) -> list[Outcome] | None:
        """``batch`` (with the ``beside`` writes of its writes) and ``riders`` in one
        command (more only when a guard failed), the riders settled here; None when the
        server serves no such command (the riders go back to their own batcher)."""
        # Counted as sent first: a write sent again after a lost reply looks whether
        # its first try landed.
        for write in (*batch, *riders):
            write.sent += 1
        try:
            ridden = await send_riding(
                batch, riders, runs=self.collection, beside=self._beside, scratch=self._scratch
            )
        except NotServed as exc:
            log.info("no client-level bulkWrite on this server (%s): riders write apart, "
                     "outcomes ride in the run's journal", exc)  # fmt: skip
            for write in (*batch, *riders):
                write.sent -= 1  # nothing was applied
            self._riding_served = False
            self._give_back(riders)
            return None
        except BaseException:
            self._give_back(riders)
            raise
        outcomes = ridden.outcomes
        self.commands += ridden.commands
        self.writes += len(batch)
        for rider in self._riders:
            rider.writes += sum(w.namespace == rider._namespace for w in riders)
        for write, outcome in zip(riders, outcomes[len(batch) :], strict=True):
            if write.future.done():
                continue
            if isinstance(outcome, BaseException):
                write.future.set_exception(outcome)
            else:
                write.future.set_result(outcome)
        return outcomes[: len(batch)]

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
                try:
                    try:
                        await self._settle(batch)
                    except Exception as exc:
                        # Only then a retry controller: building one per batch costs.
                        if not is_transient(exc):
                            raise
                        try:
                            await retrying()(self._settle, batch)
                        except Exception as again:
                            if is_transient(again):
                                raise unavailable(again) from again
                            raise
                except Exception as exc:
                    for write in batch:
                        if not write.future.done():
                            write.future.set_exception(exc)
        finally:
            self._task = None
            if self._queue:  # submitted while the last batch settled
                self._task = asyncio.ensure_future(self._drain())

    async def _settle(self, batch: Sequence[QueuedWrite]) -> None:
        """Send the writes of ``batch`` not settled yet and settle them. Sent again (the
        reply to an earlier try was lost), a write that can tell whether its first try
        landed looks first, so it is applied once."""
        pending = [w for w in batch if not w.future.done()]
        for write in pending:
            if write.sent and write.confirm is not None and await write.confirm():
                await self._send_beside(write)
                write.future.set_result(True)
        pending = [w for w in pending if not w.future.done()]
        if not pending:
            return
        outcomes = await self._send(pending)
        for write, outcome in zip(pending, outcomes, strict=True):
            if write.future.done():
                continue
            if outcome is False and write.sent > 1 and write.confirm is not None:
                outcome = await write.confirm()
                if outcome:
                    await self._send_beside(write)
            if isinstance(outcome, BaseException):
                write.future.set_exception(outcome)
            else:
                write.future.set_result(outcome)

    async def _send_beside(self, write: QueuedWrite) -> None:
        """A write confirmed landed by an earlier try whose reply was lost: its
        ``beside`` writes went in that command too, but are sent again (they are safe to
        repeat, and the write's confirmation says it still holds), so no crash of the
        server between them can lose one."""
        if not write.beside or self._beside is None:
            return
        requests = [UpdateOne(f, u, upsert=True) for f, u in write.beside]
        self.commands += 1
        try:
            await self._beside.bulk_write(requests, ordered=False)
        except BulkWriteError as exc:
            if not only_duplicates(exc):
                raise
            # A duplicate key: that document has moved on to a later attempt.

    async def _send(self, batch: Sequence[QueuedWrite]) -> list[Outcome]:
        """Send the writes of ``batch`` and return each one's outcome: in one command
        with the writes riding on it (:mod:`pikku_mongo.writes.riding`) when there are
        some, else alone as its plain command, or in an unordered bulk."""
        riders = self._take_riders()
        if riders or (self.beside_served and any(w.beside for w in batch)):
            riding = await self._send_riding(batch, riders)
            if riding is not None:
                return riding
        for write in batch:
            write.in_journal_form()  # no client-level bulkWrite: the outcomes in the journal
        self.commands += 1
        self.writes += len(batch)
        for write in batch:
            write.sent += 1
        if len(batch) == 1:
            return [await self._send_one(batch[0])]
        return await self._send_bulk(batch)

    async def _send_bulk(self, batch: Sequence[QueuedWrite]) -> list[Outcome]:
        """``batch`` in one unordered bulk write. Each write learns its outcome from its
        own write error, and a guarded write also from whether it upserted: then its
        guard failed, and the document it made is deleted."""
        errors: dict[int, Doc] = {}
        upserted: dict[int, Any] = {}
        try:
            result = await self.collection.bulk_write(
                [_request(write) for write in batch], ordered=False
            )
            upserted = dict(result.upserted_ids or {})
        except DocumentTooLarge:
            # One write can go in no command at all (refused before anything was sent):
            # send each alone, so that only that one fails.
            return [await self._send_one(write) for write in batch]
        except BulkWriteError as exc:
            errors = {int(e["index"]): e for e in exc.details.get("writeErrors", [])}
            upserted = {int(u["index"]): u["_id"] for u in exc.details.get("upserted", [])}
        made = [
            upserted[index]
            for index, write in enumerate(batch)
            if write.kind == "guarded" and index in upserted and index not in errors
        ]
        if made:
            await self.collection.delete_many({"_id": {"$in": made}, **self._scratch})
        return [
            failure_of(errors[index])
            if index in errors
            else not (write.kind == "guarded" and index in upserted)
            for index, write in enumerate(batch)
        ]

    async def _send_one(self, write: QueuedWrite) -> Outcome:
        try:
            if write.kind == "insert":
                await self.collection.insert_one(write.filter)
                return True
            if write.kind == "upsert":
                await self.collection.update_one(write.filter, write.update, upsert=True)
                return True
            result = await self.collection.update_one(write.filter, write.update)
            return result.matched_count == 1
        except DuplicateKeyError:
            return False
        except DocumentTooLarge as exc:
            return exc
        except OperationFailure as exc:
            if exc.code == DUPLICATE_KEY:
                return False
            return exc


def _request(write: QueuedWrite) -> InsertOne[Doc] | UpdateOne:
    """A queued write as a request of a bulk write (a guarded write as an upsert: its
    failed guard is then its duplicate key, or the document it made)."""
    if write.kind == "insert":
        return InsertOne(write.filter)
    return UpdateOne(write.filter, write.update, upsert=write.kind != "update")
