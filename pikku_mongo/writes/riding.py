"""Writes riding a run write (docs/guides/mongodb.md, the hot path): one command for all of them.

Two kinds of writes ride the ``runs`` group commit (:mod:`pikku_mongo.writes.batcher`) in one
client-level ``bulkWrite`` (MongoDB 8.0+, and nx-27017):

* **riders**: a workflow body's stream entries and values (inserts and upserts) wait for
  its next durable boundary; they join their own batcher's queue (``streams``,
  ``values``) without sending at once, and the ``runs`` batcher's next batch takes them;
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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

from pymongo import InsertOne, UpdateOne
from pymongo.errors import ClientBulkWriteException, InvalidOperation, OperationFailure

from pikku_mongo.wire.documents import Doc
from pikku_mongo.writes.queued import DUPLICATE_KEY, Outcome, QueuedWrite, failure_of

if TYPE_CHECKING:
    from pymongo.asynchronous.collection import AsyncCollection

#: Codes of a server that does not know the command (and nx-27017's own refusal).
_UNKNOWN_COMMAND = (59, 115)

_Model = InsertOne[Any] | UpdateOne


class NotServed(Exception):
    """The server serves no client-level ``bulkWrite``: send as before."""


@dataclass(frozen=True)
class Ridden:
    """What sending writes that ride together came to: each write's outcome (the batch's,
    then the riders'), and the commands it took."""

    outcomes: list[Outcome]
    commands: int


@dataclass(frozen=True)
class _Item:
    """One model of the command: the write it belongs to (its index among the batch and
    the riders), what it is, and its filter's shard key (a ``beside`` write's)."""

    index: int
    role: Literal["run", "beside", "rider"]
    model: _Model
    shard: Doc


async def send_riding(
    batch: Sequence[QueuedWrite],
    riders: Sequence[QueuedWrite],
    *,
    runs: AsyncCollection[Doc],
    beside: AsyncCollection[Doc] | None,
    scratch: Doc,
) -> Ridden:
    """Send ``batch`` (run writes into ``runs``, with their ``beside`` writes into
    ``beside``) and ``riders`` (inserts and upserts into the collection each names) in
    one client-level command, and more only after a failed guard. Raises
    :class:`NotServed` (nothing was applied) on a server without the command.
    ``scratch``: what matches a run document only a guarded upsert can have made."""
    items = _items(batch, riders, runs=runs, beside=beside)
    ordered = any(item.role == "beside" for item in items)
    ride = _Ride([*batch, *riders])
    commands = 0
    while items:
        models = [item.model for item in items]
        result, errors = await client_bulk_write(runs, models, ordered=ordered, sent=commands)
        commands += 1
        # Ordered, the command stops at its first error: the items after it were not
        # attempted (unordered, every item was).
        stop = min(errors) if ordered and errors else len(items)
        ride.read(items[: stop + 1], result, errors)
        items = _not_attempted(items, stop)
    await ride.clean_up(runs=runs, beside=beside, scratch=scratch)
    return Ridden(ride.outcomes(), commands)


def _items(
    batch: Sequence[QueuedWrite],
    riders: Sequence[QueuedWrite],
    *,
    runs: AsyncCollection[Doc],
    beside: AsyncCollection[Doc] | None,
) -> list[_Item]:
    """The command's models, in order: each run write followed by its ``beside``
    writes, then the riders."""
    items: list[_Item] = []
    for index, write in enumerate(batch):
        items.append(_Item(index, "run", _run_model(runs, write), {}))
        if write.beside and beside is not None:
            for filter, update in write.beside:
                model = UpdateOne(filter, update, upsert=True, namespace=beside.full_name)
                shard = {"run_id": filter["run_id"]} if "run_id" in filter else {}
                items.append(_Item(index, "beside", model, shard))
    for index, write in enumerate(riders, len(batch)):
        assert write.namespace is not None
        rider: _Model = (
            InsertOne(write.filter, namespace=write.namespace)
            if write.kind == "insert"
            else UpdateOne(write.filter, write.update, upsert=True, namespace=write.namespace)
        )
        items.append(_Item(index, "rider", rider, {}))
    return items


def _run_model(runs: AsyncCollection[Doc], write: QueuedWrite) -> _Model:
    if write.kind == "insert":
        return InsertOne(write.filter, namespace=runs.full_name)
    # A guarded write with outcomes after it is an upsert: its failed guard must be an
    # error that stops the ordered command.
    upsert = write.kind == "upsert" or (write.kind == "guarded" and bool(write.beside))
    return UpdateOne(write.filter, write.update, upsert=upsert, namespace=runs.full_name)


def _not_attempted(items: list[_Item], stop: int) -> list[_Item]:
    """The items an ordered command stopped before (at ``stop``), to send again; a run
    write that failed takes its ``beside`` writes with it: they must not land."""
    rest = stop + 1
    if rest < len(items) and items[stop].role == "run":
        failed = items[stop].index
        while rest < len(items) and items[rest].index == failed:
            rest += 1
    return items[rest:]


class _Ride:
    """What the commands of one send have told of its writes so far: each one's outcome,
    and what a failed guard let be made (a run document, and the outcomes after it)."""

    def __init__(self, writes: Sequence[QueuedWrite]) -> None:
        self._writes = writes
        self._outcomes: list[Outcome | None] = [None] * len(writes)
        self._made: list[Any] = []  # run documents only a failed guard made
        self._let_through: list[Doc] = []  # and the outcomes that came after them

    def outcomes(self) -> list[Outcome]:
        """Each write's outcome (a rider that met no error landed)."""
        return [True if o is None else o for o in self._outcomes]

    def read(self, items: Sequence[_Item], result: Any, errors: dict[int, Any]) -> None:
        """Learn from one command's ``result`` and ``errors`` (by position) the items it
        attempted, ``items``."""
        updates = result.update_results if result.has_verbose_results else {}
        for position, item in enumerate(items):
            error = errors.get(position)
            if error is not None:
                self._failed(item, error)
            elif item.role == "run":
                self._ran(item, updates.get(position))
            elif item.role == "beside":
                self._beside(item, updates.get(position))
            elif self._outcomes[item.index] is None:
                self._outcomes[item.index] = True

    def _failed(self, item: _Item, error: Any) -> None:
        # A duplicate key on an outcome: that step has moved on to a later attempt. Any
        # other error on one: the run write landed and this outcome did not, so the pass
        # must not go on as if it had (its next write carries it again).
        if item.role != "beside" or int(error.get("code", 0)) != DUPLICATE_KEY:
            self._outcomes[item.index] = failure_of(error)

    def _ran(self, item: _Item, applied: Any) -> None:
        write = self._writes[item.index]
        if write.kind != "guarded":
            self._outcomes[item.index] = True
        elif write.beside and applied is not None:  # an upsert: one it made failed its guard
            if applied.upserted_id is not None:
                self._made.append(applied.upserted_id)
            self._outcomes[item.index] = applied.upserted_id is None
        else:
            self._outcomes[item.index] = applied is not None and applied.matched_count == 1

    def _beside(self, item: _Item, applied: Any) -> None:
        if self._outcomes[item.index] is False and applied is not None and applied.upserted_id:
            self._let_through.append({"_id": applied.upserted_id, **item.shard})

    async def clean_up(
        self, *, runs: AsyncCollection[Doc], beside: AsyncCollection[Doc] | None, scratch: Doc
    ) -> None:
        """Delete what failed guards let be made."""
        if self._made:
            await runs.delete_many({"_id": {"$in": self._made}, **scratch})
        if self._let_through and beside is not None:
            await beside.delete_many({"$or": self._let_through})


async def client_bulk_write(
    runs: AsyncCollection[Doc], models: Sequence[_Model], *, ordered: bool, sent: int = 0
) -> tuple[Any, dict[int, Any]]:
    """One client-level ``bulkWrite`` (with ``runs``' write concern): its (partial)
    result and its write errors by index. Raises :class:`NotServed` (nothing was applied)
    on a server without the command; ``sent``: commands sent before this one (only a
    first may be not served)."""
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
