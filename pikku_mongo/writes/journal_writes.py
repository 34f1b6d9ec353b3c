"""How a pass's write of a run changes the run's journal (see
:mod:`engine_core.journal`): which outcomes ride there, and the ``$set``/``$unset`` that
puts them there or drops the entries copied out since."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from engine_core.records import StepRecord
from pikku_mongo.wire.checks import check_str
from pikku_mongo.wire.documents import Doc, inflight_field
from pikku_mongo.wire.journal_text import step_to_text

#: A pass's write that carries at least this many outcomes sends them to their step
#: documents or a journal page (:mod:`pikku_mongo.writes.journal_pages`) in its command, where
#: the server serves the client-level ``bulkWrite``; fewer ride in the run's journal. A
#: pass whose journal holds 15 carries them again with the next outcome: the run's
#: document stays under 16 compact entries (about 2 KB), a short run (most runs) writes
#: nothing for an inline step but its run, and the client-level command is paid once
#: per 16 steps.
BESIDE_AT = 16


def journal_changes(
    to_set: Doc,
    to_unset: Doc,
    outcomes: Sequence[StepRecord],
    forget: Iterable[str],
    texts: Sequence[str] | None = None,
) -> None:
    """Add to ``to_set`` the journal entries of ``outcomes`` (``texts``: their texts,
    when made already), and to ``to_unset`` the entries of ``forget`` that no outcome
    replaces (both on one path would conflict)."""
    keys = set()
    for index, outcome in enumerate(outcomes):
        keys.add(outcome.key)
        text = step_to_text(outcome) if texts is None else texts[index]
        to_set[f"journal.{inflight_field(outcome.key)}"] = text
    for key in forget:
        if check_str(key, "journal key") not in keys:
            to_unset[f"journal.{inflight_field(key)}"] = ""


def update_of(to_set: Doc, to_unset: Doc) -> Doc:
    """The update document of ``to_set`` and ``to_unset`` (no empty ``$unset``)."""
    update: Doc = {"$set": to_set}
    if to_unset:
        update["$unset"] = to_unset
    return update
