"""Operation ids: how a run write re-sent after a lost reply recognises its first try.

A guarded write of a run pushes a fresh random id onto the run's ``ops``, which keeps the
last :data:`OPS_KEPT`. Sent again after a lost reply and finding its guard failed, the
write asks whether its id is among them: its first try landed even when other writes
(up to ``OPS_KEPT - 1`` of them) landed on the run in between. (Before, the run kept only
the last id, so one write in between made a landed write look fenced out.)

A pass's step writes keep theirs in a ring instead (:class:`PassOps`): the pass's n-th
write sets slot ``n % OPS_KEPT`` of the run's ``pops``, so its id stays until the pass
has written ``OPS_KEPT`` more times (the other writers push onto ``ops`` and never push
it out). A ``$set`` rather than a ``$push``: nx-27017 applies ``$set`` in SQL but
``$push`` by re-encoding the whole document (measured: 0.3 ms of server time per step
write); on MongoDB both are cheap. The next pass (another token) counts from slot 0
again, so a step write counts as landed only while the run still carries its token,
which it must anyway (a pass taken over is fenced out); a pass's settle, which must be
recognised after a takeover, pushes onto ``ops``.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections import OrderedDict
from dataclasses import dataclass

from pymongo import ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection

from pikku_mongo.wire.causal import CausalReads
from pikku_mongo.wire.documents import Doc
from pikku_mongo.wire.retry import transient_retry

#: How many recent operation ids a run keeps.
OPS_KEPT = 8
#: The run's field holding the ring of its passes' operation ids.
RING = "pops"

#: This process's random prefix and a count: unique like a random id per write without
#: drawing random bytes for every step (a forked child draws its own prefix).
_PREFIX = uuid.uuid4().hex[:16]
_COUNT = itertools.count(1)


def _new_prefix() -> None:
    global _PREFIX, _COUNT
    _PREFIX, _COUNT = uuid.uuid4().hex[:16], itertools.count(1)


if hasattr(os, "register_at_fork"):  # not on Windows
    os.register_at_fork(after_in_child=_new_prefix)


@dataclass(frozen=True)
class OpMark:
    """An operation id as a write carries it: what the write adds to its update for
    it, and the filter that finds the run while the run holds it."""

    update: Doc
    found: Doc

    def on(self, update: Doc) -> Doc:
        """``update`` with this mark's fields added (a new document; ``update`` and its
        parts stay as they were)."""
        marked = dict(update)
        for operator, fields in self.update.items():
            marked[operator] = {**marked.get(operator, {}), **fields}
        return marked


def _fresh() -> str:
    return f"{_PREFIX}{next(_COUNT):x}"


def pushed_op(doc_id: str) -> OpMark:
    """A fresh operation id pushed onto the run's ``ops`` (of which it keeps the last
    ``OPS_KEPT``); found while not pushed out by as many later ones."""
    op = _fresh()
    # Plain ``{ops: op}``: array containment on every server (nx-27017's ``$eq`` does
    # not look inside arrays); the ``_id`` finds the document.
    return OpMark(
        {"$push": {"ops": {"$each": [op], "$slice": -OPS_KEPT}}}, {"_id": doc_id, "ops": op}
    )


class PassOps:
    """Which slot of the ring each pass's next write takes: a count per (run, token),
    the least recently written forgotten past ``size`` (a pass that writes again after
    that restarts its count, which only shortens how long its earlier ids stay)."""

    def __init__(self, size: int = 65536) -> None:
        self._size = size
        self._next: OrderedDict[tuple[str, int], int] = OrderedDict()

    def add(self, doc_id: str, token: int) -> OpMark:
        """A fresh operation id in this pass's next slot of the ring."""
        pass_key = (doc_id, token)
        n = self._next.pop(pass_key, 0)
        self._next[pass_key] = n + 1
        if len(self._next) > self._size:
            self._next.popitem(last=False)
        op = _fresh()
        slot = f"{RING}.s{n % OPS_KEPT}"
        return OpMark({"$set": {slot: op}}, {"_id": doc_id, slot: op})

    def forget(self, doc_id: str, token: int) -> None:
        """The pass holding ``token`` on run ``doc_id`` has ended: drop its count."""
        self._next.pop((doc_id, token), None)


async def modify_recognised(
    runs: AsyncCollection[Doc], query: Doc, update: Doc, mark: OpMark, *, reads: CausalReads
) -> Doc | None:
    """1 findAndModify of the run ``query`` matches (``update`` carries ``mark``), the run
    as it left it, or None when the guard failed. Sent again after a lost reply, it
    first reads whether its first try landed (``mark.found``): then that run."""
    tries = 0

    async def once() -> Doc | None:
        nonlocal tries
        tries += 1
        if tries > 1:
            mine = await reads.read_one(runs, mark.found)
            if mine is not None:
                return mine
        return await runs.find_one_and_update(query, update, return_document=ReturnDocument.AFTER)

    return await transient_retry(once)()
