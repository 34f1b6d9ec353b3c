"""Writes riding a run write (DESIGN 3g, 7): one command for all of them.

Two kinds of writes ride the ``runs`` group commit (:mod:`pikku_mongo.writes.batcher`) in one
client-level ``bulkWrite`` (MongoDB 8.0+, and nx-27017):

* **stream entries**: a workflow body's stream writes wait for its next durable
  boundary; they join the ``streams`` batcher's queue without sending at once, and the
  ``runs`` batcher's next batch takes them;
* **step outcomes** (``beside`` writes): a pass's write that starts a step carries the
  outcomes of the steps before it as upserts of their step documents or of a journal
  page (:mod:`pikku_mongo.writes.journal_pages`), so the run document, rewritten at every
  step, never holds many and stays about the same size.

An outcome must land only if its run write's guard (the run's token and status) holds.
A batch carrying outcomes is therefore sent *ordered*, each run write followed by its
outcomes, the run write as an upsert on its ``_id``: when its guard fails, the document
that exists with that ``_id`` makes the upsert collide, the duplicate-key error stops
the ordered command before the outcomes, and what came after is sent again in a
command of its own (a failed guard is rare: it costs a command then, never otherwise).
When no run has that ``_id`` at all the upsert creates one: the write is reported
fenced out, and that document and the outcomes it let through are deleted at once.
Without outcomes the batch is sent unordered, and each write learns its own outcome
from the verbose results (a guarded write's matched count is its guard).

A server without that command (mongoeco, MongoDB before 8.0) is found out once: the
entries then go in a command of their own, and the outcomes in the run's journal.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

from pymongo import InsertOne, UpdateOne
from pymongo.errors import ClientBulkWriteException, InvalidOperation, OperationFailure

from pikku_mongo.wire.documents import Doc
from pikku_mongo.writes.queued import QueuedWrite

if TYPE_CHECKING:
    from pymongo.asynchronous.collection import AsyncCollection

_DUPLICATE_KEY = 11000
#: Codes of a server that does not know the command (and nx-27017's own refusal).
_UNKNOWN_COMMAND = (59, 115)

Outcome = bool | BaseException
_Model = InsertOne[Any] | UpdateOne
#: One model of the command: the write it belongs to (its index), what it is, and its
#: filter's shard key (a ``beside`` write's).
_Item = tuple[int, Literal["run", "beside", "rider"], _Model, "Doc"]


class NotServed(Exception):
    """The server serves no client-level ``bulkWrite``: send as before."""


async def send_riding(
    runs: AsyncCollection[Doc],
    streams: AsyncCollection[Doc] | None,
    beside: AsyncCollection[Doc] | None,
    scratch: Doc,
    batch: Sequence[QueuedWrite],
    riders: Sequence[QueuedWrite],
) -> tuple[list[Outcome], int]:
    """Send ``batch`` (run writes, with their ``beside`` writes into ``beside``) and
    ``riders`` (inserts into ``streams``); the outcomes of ``batch`` then ``riders``, in
    order, and the commands it took. Raises :class:`NotServed` (nothing was applied) on
    a server without the command. ``scratch``: what matches a run document only a
    guarded upsert can have made."""
    items: list[_Item] = []
    ordered = False
    for index, write in enumerate(batch):
        items.append((index, "run", _run_model(runs, write), {}))
        if write.beside and beside is not None:
            ordered = True
            for filter, update in write.beside:
                model: _Model = UpdateOne(filter, update, upsert=True, namespace=beside.full_name)
                shard = {"run_id": filter["run_id"]} if "run_id" in filter else {}
                items.append((index, "beside", model, shard))
    for index, write in enumerate(riders, len(batch)):
        assert streams is not None
        insert: _Model = InsertOne(write.filter, namespace=streams.full_name)
        items.append((index, "rider", insert, {}))
    writes = [*batch, *riders]
    outcomes: list[Outcome | None] = [None] * len(writes)
    made: list[Any] = []  # run documents only a failed guard made
    let_through: list[Doc] = []  # and the outcomes that came after them
    commands = 0
    while items:
        result, errors = await _command(runs, [item[2] for item in items], ordered, commands)
        commands += 1
        updates = result.update_results if result.has_verbose_results else {}
        # Ordered, the command stops at its first error: the items after it were not
        # attempted (unordered, every item was).
        stop = min(errors) if ordered and errors else len(items)
        for position in range(min(stop + 1, len(items))):
            index, role, _, shard = items[position]
            error = errors.get(position)
            write = writes[index]
            if error is not None:
                if role != "beside":
                    outcomes[index] = _failure(error)
                elif int(error.get("code", 0)) != _DUPLICATE_KEY:
                    # The run write landed and this outcome did not: the pass must not
                    # go on as if it had (its next write carries it again).
                    outcomes[index] = _failure(error)
                # (A duplicate key: that step has moved on to a later attempt.)
            elif role == "run":
                applied = updates.get(position)
                if write.kind == "guarded" and write.beside and applied is not None:
                    if applied.upserted_id is not None:
                        made.append(applied.upserted_id)
                        outcomes[index] = False
                    else:
                        outcomes[index] = True
                elif write.kind == "guarded":
                    outcomes[index] = applied is not None and applied.matched_count == 1
                else:
                    outcomes[index] = True
            elif role == "beside":
                applied = updates.get(position)
                if outcomes[index] is False and applied is not None and applied.upserted_id:
                    let_through.append({"_id": applied.upserted_id, **shard})
            elif outcomes[index] is None:
                outcomes[index] = True
        rest = stop + 1
        if rest < len(items) and items[stop][1] == "run":
            # A run write that failed: its outcomes were not attempted, and must not be.
            failed = items[stop][0]
            while rest < len(items) and items[rest][0] == failed:
                rest += 1
        items = items[rest:]
    if made:
        await runs.delete_many({"_id": {"$in": made}, **scratch})
    if let_through and beside is not None:
        await beside.delete_many({"$or": let_through})
    return [True if o is None else o for o in outcomes], commands


def _run_model(runs: AsyncCollection[Doc], write: QueuedWrite) -> _Model:
    if write.kind == "insert":
        return InsertOne(write.filter, namespace=runs.full_name)
    # A guarded write with outcomes after it is an upsert: its failed guard must be an
    # error that stops the ordered command.
    upsert = write.kind == "upsert" or (write.kind == "guarded" and bool(write.beside))
    return UpdateOne(write.filter, write.update, upsert=upsert, namespace=runs.full_name)


def _failure(error: Any) -> Outcome:
    if int(error.get("code", 0)) == _DUPLICATE_KEY:
        return False
    return OperationFailure(str(error.get("errmsg", error)), error.get("code"))


async def _command(
    runs: AsyncCollection[Doc], models: list[_Model], ordered: bool, sent: int
) -> tuple[Any, dict[int, Any]]:
    """One client-level ``bulkWrite``: its (partial) result and its write errors by
    index. ``sent``: commands sent before this one (only a first may be not served)."""
    try:
        result = await runs.database.client.bulk_write(
            models, ordered=ordered, verbose_results=True, write_concern=runs.write_concern
        )
        return result, {}
    except InvalidOperation as exc:  # refused before sending (an older server)
        if sent:
            raise
        raise NotServed(str(exc)) from exc
    except ClientBulkWriteException as exc:
        if isinstance(exc.error, BaseException):
            # The command failed as a whole (a lost connection, a stepped-down primary):
            # what it was is what decides a retry, and every write is sent again.
            raise exc.error from exc
        if exc.partial_result is None or exc.write_concern_errors:
            raise
        errors = {int(e["idx"]): e for e in cast(list[Any], exc.write_errors or [])}
        return exc.partial_result, errors
    except OperationFailure as exc:
        if not sent and (exc.code in _UNKNOWN_COMMAND or "bulkWrite" in str(exc)):
            raise NotServed(str(exc)) from exc
        raise
