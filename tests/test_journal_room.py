"""The journal's room book (:class:`~engine_core.run.journal_room.JournalRoom`) on its
own: what a take journals and what it moves, the reservations of takes in flight
together, and what a failed take gives back (a sibling's reservation stays)."""

from __future__ import annotations

from engine_core.common.journal import LARGE_OUTCOME
from engine_core.records import StepRecord
from engine_core.run.journal_room import JournalRoom, outcome_size


def _step(key: str, length: int = 100) -> StepRecord:
    return StepRecord(run_id="r", key=key, kind="inline", status="succeeded", result="x" * length)


def _keys(steps: list[StepRecord]) -> list[str]:
    return [s.key for s in steps]


def test_a_take_journals_what_fits_and_reserves_its_room() -> None:
    room = JournalRoom({})
    a, b = _step("a"), _step("b")
    taken = room.take([a, b], forget=(), journal={}, room=10_000)
    assert _keys(taken.journaled) == ["a", "b"] and taken.moved == []
    assert room.total == outcome_size(a) + outcome_size(b)
    assert room.holds("a") and room.holds("b")


def test_outcomes_past_the_room_or_too_large_go_to_their_step_records() -> None:
    room = JournalRoom({})
    small, large = _step("small"), _step("large", LARGE_OUTCOME + 1)
    fits, past = _step("fits", 300), _step("past", 300)
    size = outcome_size(small) + outcome_size(fits)
    taken = room.take([small, large, fits, past], forget=(), journal={}, room=size)
    assert _keys(taken.journaled) == ["small", "fits"]
    assert _keys(taken.moved) == ["large", "past"]
    assert room.total == size and not room.holds("large") and not room.holds("past")


def test_takes_in_flight_together_never_fill_the_room_twice() -> None:
    room = JournalRoom({})
    first, second = _step("first", 500), _step("second", 500)
    one = outcome_size(first)
    assert _keys(room.take([first], forget=(), journal={}, room=one).journaled) == ["first"]
    # The first write has not landed: its room stays reserved for it.
    assert _keys(room.take([second], forget=(), journal={}, room=one).moved) == ["second"]


def test_an_outcome_replaces_its_keys_entry_and_a_forgotten_entry_frees_its_room() -> None:
    old, gone = _step("k", 50), _step("gone", 50)
    journal = {"k": old, "gone": gone}
    room = JournalRoom(journal)
    new = _step("k", 70)
    taken = room.take([new], forget={"gone"}, journal=journal, room=10_000)
    assert taken.journaled == [new] and taken.moved == []
    assert room.total == outcome_size(new) and not room.holds("gone")
    assert taken.before == {"k": outcome_size(old), "gone": outcome_size(gone)}


def test_a_shrunk_room_moves_the_oldest_entries_out_until_the_rest_fits() -> None:
    journal = {k: _step(k) for k in ("a", "b", "c")}
    room = JournalRoom(journal)
    one = outcome_size(journal["a"])
    taken = room.take([], forget=(), journal=journal, room=one)
    assert _keys(taken.moved) == ["a", "b"] and taken.journaled == []
    assert room.total == one and room.holds("c") and not room.holds("a")


def test_a_failed_take_is_undone_and_counts_what_it_dropped_again() -> None:
    gone = _step("gone")
    journal = {"gone": gone}
    room = JournalRoom(journal)
    taken = room.take([_step("a")], forget={"gone"}, journal=journal, room=10_000)
    room.undo(taken)
    # Its entry may still be in the journal: counted again. Its outcome, given back to
    # the pass, stays counted until taken again (too much is safe, too little is not).
    assert room.holds("gone") and room.total == outcome_size(gone) + outcome_size(_step("a"))


def test_a_cancelled_take_keeps_a_reservation_taken_meanwhile() -> None:
    # A step's start moves an outcome that no longer fits to its step record; while that
    # write is in flight, a sibling's outcome is journaled; then the start is cancelled.
    journal = {"s": _step("s", 500)}
    room = JournalRoom(journal)
    space = outcome_size(journal["s"]) + outcome_size(_step("y", 200))
    start = room.take([_step("big", 900)], forget=(), journal=journal, room=space)
    assert _keys(start.moved) == ["big"]
    sibling = room.take([_step("y", 200)], forget=(), journal=journal, room=space)
    assert _keys(sibling.journaled) == ["y"]
    room.undo(start)
    assert room.holds("y") and room.total == space
    # So the next take still sees the journal full.
    assert _keys(room.take([_step("z", 1)], forget=(), journal=journal, room=space).moved) == ["z"]


def test_outcomes_written_to_their_step_records_release_their_room() -> None:
    room = JournalRoom({})
    a, b = _step("a"), _step("b")
    room.take([a, b], forget=(), journal={}, room=10_000)
    room.release(["a", "missing"])
    assert room.total == outcome_size(b) and not room.holds("a")
