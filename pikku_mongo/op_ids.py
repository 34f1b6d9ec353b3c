"""Operation ids: how a run write re-sent after a lost reply recognises its first try.

A guarded write of a run pushes a fresh random id onto the run's ``ops``, which keeps the
last :data:`OPS_KEPT`. Sent again after a lost reply and finding its guard failed, the
write asks whether its id is among them: its first try landed even when other writes
(up to ``OPS_KEPT - 1`` of them) landed on the run in between. (Before, the run kept only
the last id, so one write in between made a landed write look fenced out.)
"""

from __future__ import annotations

import itertools
import os
import uuid

from pikku_mongo.documents import Doc

#: How many recent operation ids a run keeps.
OPS_KEPT = 8

#: This process's random prefix and a count: unique like a random id per write without
#: drawing random bytes for every step (a forked child draws its own prefix).
_PREFIX = uuid.uuid4().hex[:16]
_COUNT = itertools.count(1)


def _new_prefix() -> None:
    global _PREFIX, _COUNT
    _PREFIX, _COUNT = uuid.uuid4().hex[:16], itertools.count(1)


if hasattr(os, "register_at_fork"):  # not on Windows
    os.register_at_fork(after_in_child=_new_prefix)


def new_op(update: Doc) -> str:
    """Add a fresh operation id to ``update`` (which must not push to ``ops`` already)
    and return it."""
    op = f"{_PREFIX}{next(_COUNT):x}"
    update.setdefault("$push", {})["ops"] = {"$each": [op], "$slice": -OPS_KEPT}
    return op


def landed_filter(doc_id: str, op: str) -> Doc:
    """The run, if the write with operation id ``op`` landed on it (and was not pushed out
    by ``OPS_KEPT`` later ones)."""
    # Plain ``{ops: op}``: array containment on every server (nx-27017's ``$eq`` does
    # not look inside arrays); the ``_id`` finds the document.
    return {"_id": doc_id, "ops": op}
