"""Journal pages: the outcomes a run's journal lets go, in one step document together.

A pass's write that takes 16 outcomes out of the run's journal (see
:mod:`pikku_mongo.writes.journal_writes`) used to write each to its own step document: 16
upserts into a collection with five indexes, which cost the server (nx-27017, measured)
as much as the 16 run writes they rode on. An outcome that can never change again, a
succeeded inline step's at its first attempt that no compensation will mark, goes
instead into one *page*: a document of the ``steps`` collection holding those outcomes
as the journal held them (compact text, :mod:`pikku_mongo.wire.journal_text`), written by
the same command in the same guarded way. Every other outcome (a failure, a retry and
what came after it, a step a compensation may mark) still gets its own step document,
so whatever later finds or changes a step by its ``_id`` (a retry, a claim, a child's
settle, the sweep for sleeps and retries due) never meets a page.

A page carries ``run_id`` (its shard key, so a run's steps are read by the same query)
and ``fmt``, but none of the fields the other queries of ``steps`` match (``status``,
``notified``, ``claim_holder``...), so no claim, sweep or count ever sees one. Its
``_id`` is derived from what it holds, so a page written again after a lost reply
rewrites the same document with the same content. A reader of a run's steps expands
its pages; a step found both in a page and in a step document is the one with more
attempts (the step document on a tie).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence

from engine_core.records import StepRecord
from pikku_mongo.wire.checks import check_str
from pikku_mongo.wire.documents import FORMAT, Doc, lean_step_from_doc, step_from_doc
from pikku_mongo.wire.encoding import pack, unpack
from pikku_mongo.wire.filters import eq, step_upsert
from pikku_mongo.wire.journal_text import lean_step_from_text, step_from_text

#: A page document's field holding its outcomes (journal texts, in the order written).
PAGE = "page"
#: Between a page's run id and its digest (a step ``_id`` has ``\\x01\\x03`` there, and
#: :func:`~pikku_mongo.wire.encoding.pack` never leaves a bare ``\\x01``: no clash).
_PAGE_SEPARATOR = "\x01\x04"


def pageable(step: StepRecord) -> bool:
    """Whether ``step``'s outcome is final and no step document of it can exist: nothing
    will find or change its document again, so it may go into a page. (A step that ran
    more than once may have left one, ``scheduled`` for a retry: its outcome goes over
    that document, or the recovery sweep would keep finding a sleep due.)"""
    return (
        step.status == "succeeded"
        and step.attempts == 1
        and step.kind == "inline"
        and not step.compensable
        and step.notified
        and not step.halted
    )


def beside_writes(
    run_id: str, outcomes: Sequence[StepRecord], texts: Sequence[str]
) -> list[tuple[Doc, Doc]]:
    """The upserts that write ``outcomes`` (of run ``run_id``; ``texts``: their journal
    texts) beside the run: one page for the final ones, a step document for each other."""
    writes: list[tuple[Doc, Doc]] = []
    final: list[str] = []
    for step, text in zip(outcomes, texts, strict=True):
        if pageable(step):
            final.append(text)
        else:
            writes.append(step_upsert(step))
    if final:
        writes.append(page_upsert(run_id, final))
    return writes


def page_upsert(run_id: str, texts: Sequence[str]) -> tuple[Doc, Doc]:
    """The upsert of the page holding the outcomes ``texts`` (journal texts; the same
    texts, the same ``_id``: safe to repeat)."""
    packed = pack(check_str(run_id, "run id"))
    digest = hashlib.blake2b("\x00".join(texts).encode(), digest_size=16).hexdigest()
    guard = {"_id": packed + _PAGE_SEPARATOR + digest, "run_id": eq(packed)}
    return guard, {"$set": {"fmt": FORMAT, "run_id": packed, PAGE: list(texts)}}


def steps_of_docs(docs: Iterable[Doc], *, lean: bool = False) -> list[StepRecord]:
    """The step records that ``docs`` (step documents and pages, of any runs) hold: one
    per (run, key), the one with more attempts, a step document's on a tie."""
    decode: Callable[[Doc], StepRecord] = lean_step_from_doc if lean else step_from_doc
    from_text = lean_step_from_text if lean else step_from_text
    found: dict[tuple[str, str], StepRecord] = {}
    paged: list[StepRecord] = []
    for doc in docs:
        if PAGE in doc:
            run_id = unpack(doc["run_id"])
            paged.extend(from_text(run_id, text) for text in doc[PAGE])
        else:
            step = decode(doc)
            found[(step.run_id, step.key)] = step
    for step in paged:
        held = found.get((step.run_id, step.key))
        if held is None or step.attempts > held.attempts:
            found[(step.run_id, step.key)] = step
    return list(found.values())
