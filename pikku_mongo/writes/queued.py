"""A write as it waits in a group commit's queue (:mod:`pikku_mongo.writes.batcher`)
and rides a run write (:mod:`pikku_mongo.writes.riding`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pymongo.errors import BulkWriteError, OperationFailure

from pikku_mongo.wire.documents import Doc

Kind = Literal["insert", "update", "guarded", "upsert"]
#: Whether a write landed (a failed guard, or a duplicate ``_id``: False), or why not.
Outcome = bool | BaseException
Confirm = Callable[[], Awaitable[bool]]
#: The server's code for a duplicate key.
DUPLICATE_KEY = 11000


def only_duplicates(exc: BulkWriteError) -> bool:
    """Whether every write error of a bulk write is a duplicate key (documents a repeat
    or a later write put there first): nothing else went wrong."""
    errors = exc.details.get("writeErrors", [])
    return all(int(e.get("code", 0)) == DUPLICATE_KEY for e in errors)


def failure_of(error: Any) -> Outcome:
    """The outcome of a write that met a write error: a duplicate key is the write's own
    answer (False), anything else an error raised to its caller."""
    if int(error.get("code", 0)) == DUPLICATE_KEY:
        return False
    return OperationFailure(str(error.get("errmsg", error)), error.get("code"))


@dataclass
class QueuedWrite:
    """One write waiting in a group commit's queue, and the future its caller awaits."""

    kind: Kind
    filter: Doc
    update: Doc
    future: asyncio.Future[bool] = field(repr=False)
    confirm: Confirm | None = None
    sent: int = 0
    #: Step documents upserted by the same command, after this write and only if it
    #: lands: (filter, update) pairs (see :mod:`pikku_mongo.writes.riding`).
    beside: Sequence[tuple[Doc, Doc]] = ()
    #: What to send instead, without ``beside``, on a server without that command.
    fallback: Doc | None = None
    #: The collection a write that may ride a run write goes to (``db.collection``).
    namespace: str | None = None

    def in_journal_form(self) -> None:
        """Send :attr:`fallback` instead, without :attr:`beside` (a server found to
        serve no client-level ``bulkWrite``: the outcomes go in the run's journal)."""
        if self.fallback is not None:
            self.update, self.fallback, self.beside = self.fallback, None, ()
