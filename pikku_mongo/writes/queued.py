"""A write as it waits in a group commit's queue (:mod:`pikku_mongo.writes.batcher`)
and rides a run write (:mod:`pikku_mongo.writes.riding`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pikku_mongo.wire.documents import Doc

Kind = Literal["insert", "update", "guarded", "upsert"]


Confirm = Callable[[], Awaitable[bool]]


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
