"""What a pass may keep in its run's journal: how much room it has, what an outcome
takes of it, which outcomes may stay there once the pass ends, the room's book
(:class:`JournalRoom`), kept by the pass as its writes take and give back room, and
what one write of the pass carries (:class:`Carry`)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from engine_core.common.journal import JOURNAL_BYTES, LARGE_OUTCOME, RECORD_ROOM
from engine_core.common.values import stored_size
from engine_core.records import StepRecord


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


def count_again(sizes: dict[str, int], before: Mapping[str, int]) -> int:
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
    inline step (or compensation, patch marker, reply). Anything else (a wake of a sleep
    or an event, a retry waiting out its delay) must be in its step record, where
    recovery's sweeps look."""
    return step.kind in ("inline", "compensation", "patch", "reply") and step.status in (
        "succeeded",
        "failed",
    )


@dataclass(frozen=True)
class Carry:
    """What one write of a pass carries: the outcomes it journals (or writes beside the
    run), the in-flight marks it clears, and the journal entries it drops."""

    outcomes: list[StepRecord]
    done: frozenset[str] = frozenset()
    forget: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Taken:
    """What one take from the journal's room decided, reserved at once."""

    #: The outcomes the write puts in the journal (their room is reserved).
    journaled: list[StepRecord]
    #: What must be in its step record before the write: journal entries moved out to
    #: make room, then outcomes too large for the journal or past its room.
    moved: list[StepRecord]
    #: The room's book as the take found it (what the journal held; undone to it).
    before: Mapping[str, int]


class JournalRoom:
    """The book of a run's journal as one pass's writes leave it: what each outcome
    there takes (``outcome_size``) and their total, kept within the room a write has
    (``journal_room``). Pure: it decides, the pass writes.

    A take reserves at once, so writes in flight together never fill the room twice;
    a take whose write fails is undone (:meth:`undo`) without losing what another take
    reserved meanwhile."""

    def __init__(self, journal: Mapping[str, StepRecord]) -> None:
        self._sizes: dict[str, int] = {k: outcome_size(s) for k, s in journal.items()}
        self._total = sum(self._sizes.values())  # kept with ``_sizes``: never summed again

    @property
    def total(self) -> int:
        """The characters the journal's outcomes take, as this pass counts them."""
        return self._total

    def holds(self, key: str) -> bool:
        """Whether the book counts an entry of ``key`` in the journal."""
        return key in self._sizes

    def take(
        self,
        outcomes: Iterable[StepRecord],
        *,
        forget: Collection[str],
        journal: Mapping[str, StepRecord],
        room: int,
    ) -> Taken:
        """Decide what a write carries: ``outcomes`` (new, replacing their keys' entries)
        go into the journal while they fit in ``room`` and none is too large
        (``LARGE_OUTCOME``), the others to their step records; the ``forget`` entries
        leave it; and when the room shrank (a large output beside the journal), entries
        of ``journal`` (what it holds now) move out, oldest first, until the rest fits."""
        before = self._sizes
        held = dict(before)  # copied at C speed: a journal may hold thousands of entries
        total = self._total
        outcomes = list(outcomes)
        for key in (*forget, *(s.key for s in outcomes)):
            total -= held.pop(key, 0)
        moved: list[StepRecord] = []
        if total > room:  # the room shrank (a large output): make it fit
            for key in [k for k in held if k in journal]:
                moved.append(journal[key])
                total -= held.pop(key)
                if total <= room:
                    break
        journaled: list[StepRecord] = []
        for step in outcomes:
            size = outcome_size(step)
            if size <= LARGE_OUTCOME and total + size <= room:
                journaled.append(step)
                held[step.key] = size
                total += size
            else:
                moved.append(step)
        self._sizes, self._total = held, total
        return Taken(journaled, moved, before)

    def undo(self, taken: Taken) -> None:
        """A take's write failed: count again what it dropped (see :func:`count_again`);
        what was taken since keeps its reservation."""
        self._total += count_again(self._sizes, taken.before)

    def release(self, keys: Iterable[str]) -> None:
        """The outcomes of ``keys`` went to their step records, not the journal."""
        for key in keys:
            self._total -= self._sizes.pop(key, 0)
