"""How a pass's write of a run changes the run's journal (see
:mod:`engine_core.common.journal`): which outcomes ride there, and the update
(:class:`RunUpdate`) that puts them there or drops the entries copied out since."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

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


@dataclass(frozen=True)
class RunUpdate:
    """What a write of a run sets and unsets (no field in both), built up without
    changing what it was built from."""

    set: Mapping[str, Any]
    unset: Mapping[str, Any] = field(default_factory=dict)

    def with_journal(
        self,
        outcomes: Sequence[StepRecord] = (),
        forget: Iterable[str] = (),
        texts: Sequence[str] | None = None,
    ) -> RunUpdate:
        """This update, also putting ``outcomes`` in the run's journal (``texts``: their
        texts, when made already) and dropping the entries of ``forget`` that no
        outcome replaces (both on one path would conflict)."""
        to_set, to_unset = dict(self.set), dict(self.unset)
        keys = set()
        for index, outcome in enumerate(outcomes):
            keys.add(outcome.key)
            text = step_to_text(outcome) if texts is None else texts[index]
            to_set[f"journal.{inflight_field(outcome.key)}"] = text
        for key in forget:
            if check_str(key, "journal key") not in keys:
                to_unset[f"journal.{inflight_field(key)}"] = ""
        return RunUpdate(to_set, to_unset)

    def document(self) -> Doc:
        """The update document (no empty ``$unset``)."""
        update: Doc = {"$set": dict(self.set)}
        if self.unset:
            update["$unset"] = dict(self.unset)
        return update
