"""What a pass may keep in its run's journal: how much room it has, what an outcome
takes of it, and which outcomes may stay there once the pass ends."""

from __future__ import annotations

from engine_core.journal import JOURNAL_BYTES, RECORD_ROOM
from engine_core.records import StepRecord
from engine_core.values import stored_size


def outcome_size(step: StepRecord) -> int:
    """About how many characters ``step`` takes in the journal (or in its own record):
    its values, its history's errors, and a bound for the rest."""
    size = 256 + stored_size(step.result, step.error)
    for entry in step.history:
        size += 96 if entry.error is None else 96 + stored_size(entry.error)
    return size


def journal_room(beside: int) -> int:
    """What the journal may hold in a run's record that also holds ``beside`` characters
    of values (its input, and its output and error when the write settles it)."""
    return max(0, min(JOURNAL_BYTES, RECORD_ROOM - beside))


def count_again(sizes: dict[str, int], before: dict[str, int]) -> int:
    """After a take from the journal's room failed: count in ``sizes`` again what it
    dropped of ``before``, its count when it began, and return what the total grows by.
    What was taken since keeps its reservation. Counting too much (an outcome given
    back, until it is taken again; an entry a write taken meanwhile dropped) only sends
    more outcomes to their step records: safe, where counting too little is not."""
    grown = 0
    for key, size in before.items():
        now = sizes.get(key, 0)
        if now < size:
            sizes[key] = size
            grown += size - now
    return grown


def kept_in_journal(step: StepRecord) -> bool:
    """Whether an outcome may stay in the run's journal once the pass ends: a finished
    inline step. Anything else (a wake of a sleep or an event, a retry waiting out its
    delay) must be in its step record, where recovery's sweeps look."""
    return step.kind in ("inline", "compensation", "patch") and step.status in (
        "succeeded",
        "failed",
    )
