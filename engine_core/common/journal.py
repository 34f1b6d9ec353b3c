"""A run's journal: step outcomes recorded on the run itself, read with its steps.

A pass writes the outcome of step k in the same write that starts step k+1 (the body
between two steps is deterministic, so the outcome need only be durable by the next
step boundary). Those outcomes live in the run's ``journal`` until they are copied to
the step records; every reader sees the two merged. A store may write them to the step
records instead, by the same write (:func:`journals`): MongoStore does once 16 gather,
so the run's record stays small however long the run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from engine_core.records import RunRecord, StepRecord

#: A journal holding this many outcomes is copied to the step records (so the run's
#: record, rewritten at every step, stays small).
FLUSH_AT = 64
#: An outcome whose value is larger than this (JSON characters) goes to its step record
#: before the next step starts instead of into the journal.
LARGE_OUTCOME = 64 * 1024
#: The run's journal holds at most about this many characters of outcomes: the outcomes
#: a write would take it past go to their step records instead, so neither the write nor
#: the run's record (rewritten at every step) comes near the 16 MiB a document may hold,
#: however many steps end at once (a wide ``asyncio.gather``).
JOURNAL_BYTES = 1024 * 1024
#: What a run's record may hold of its input, output and journal together (characters):
#: the rest of 16 MiB is for its other fields.
RECORD_ROOM = 16 * 1024 * 1024 - 256 * 1024


def newer(entry: StepRecord, stored: StepRecord | None) -> bool:
    """Whether the journal's ``entry`` supersedes the ``stored`` step record: a pass
    journals only steps it owns, so its entry wins unless the record has moved on to a
    later attempt."""
    return stored is None or entry.attempts >= stored.attempts


def merged(run: RunRecord, steps: Iterable[StepRecord]) -> dict[str, StepRecord]:
    """The run's steps by key: its step records with the journal's outcomes over them."""
    by_key = {s.key: s for s in steps}
    for key, entry in run.journal.items():
        if newer(entry, by_key.get(key)):
            by_key[key] = entry
    return by_key


def merged_steps(run: RunRecord, steps: Iterable[StepRecord]) -> list[StepRecord]:
    """:func:`merged`, as a list."""
    return list(merged(run, steps).values())


def journals(store: object, outcomes: Sequence[StepRecord] = ()) -> bool:
    """Whether ``store``'s ``start_step`` and ``record_steps`` put ``outcomes`` in the
    run's journal (the ``Store`` protocol's default). A store that may write them to
    their step records instead, in the same write and only if it lands, says which with
    a method ``journals_outcomes(outcomes) -> bool``; asked after such a write, it
    answers for that write."""
    probe: Callable[[Sequence[StepRecord]], bool] | None = getattr(store, "journals_outcomes", None)
    return True if probe is None else bool(probe(outcomes))
