"""The run's journal holds each outcome as compact text that reads back as the same
step record, and a journal written by an earlier version (the long form) still reads."""

from __future__ import annotations

from datetime import timedelta

import pytest

from engine_core.common.clock import utcnow
from engine_core.records import AttemptEntry, StepRecord
from pikku_mongo.wire.journal_text import RecentTexts, step_from_text, step_to_text
from tests.support.legacy_journal import long_text

NOW = utcnow()


def _steps() -> list[StepRecord]:
    ran = "app.flows:checkout.<locals>.charge"
    return [
        StepRecord(run_id="r", key="bare", kind="inline", status="pending"),
        StepRecord(
            run_id="r",
            key="s58",
            kind="inline",
            status="succeeded",
            attempts=1,
            updated_at=NOW,
            ended_at=NOW,
            retry_delay=0.0,
            history=[AttemptEntry(1, "succeeded", NOW, started_at=NOW - timedelta(microseconds=6))],
            order=58,
            ran=ran,
            result={"$set": [1, "two", None], "a.b": 3.5},
        ),
        StepRecord(
            run_id="r",
            key="retry\x00me",
            kind="compensation",
            status="scheduled",
            attempts=2,
            max_attempts=5,
            error={"type": "ValueError", "message": "no", "stack": "..."},
            due_at=NOW + timedelta(hours=1),
            scheduled_at=NOW - timedelta(days=3),
            updated_at=NOW,
            retry_delay="exponential",
            timeout=2.5,
            compensable=True,
            notified=False,
            traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01",
            history=[
                AttemptEntry(1, "failed", NOW - timedelta(seconds=9), error={"m": "x"}),
                AttemptEntry(2, "scheduled", NOW, started_at=None, error={"m": "y"}),
            ],
        ),
        StepRecord(
            run_id="r",
            key="no-update",
            kind="patch",
            status="succeeded",
            ended_at=NOW,
            child_run_id="c",
            event="e",
            function="f",
            payload=[1],
            halted=True,
            claim_holder="h",
            claim_expires_at=NOW,
        ),
    ]


@pytest.mark.parametrize("step", _steps(), ids=lambda s: s.key)
def test_a_journal_outcome_reads_back_as_the_same_record(step: StepRecord) -> None:
    assert step_from_text("r", step_to_text(step)) == step


@pytest.mark.parametrize("step", _steps(), ids=lambda s: s.key)
def test_a_journal_written_by_an_earlier_version_still_reads(step: StepRecord) -> None:
    assert step_from_text("r", long_text(step)) == step


def test_a_typical_outcome_takes_about_half_the_long_form() -> None:
    typical = _steps()[1]
    typical.result = None
    assert len(step_to_text(typical)) < 0.6 * len(long_text(typical))


def test_recent_texts_make_each_records_text_once_and_stay_bounded() -> None:
    """A page sends its entries' texts as journaled; a new record of the same step (the
    engine makes one per change) gets its own text; big texts and old ones are not held."""
    texts = RecentTexts(size=2, largest=300)
    first = _steps()[1]
    made = texts.text(first)
    assert made == step_to_text(first)
    assert texts.text(first) is made  # held: not made again
    changed = StepRecord(**{**first.__dict__, "attempts": 2, "history": list(first.history)})
    assert texts.text(changed) == step_to_text(changed) != made
    big = StepRecord(**{**first.__dict__, "result": "x" * 400})
    assert texts.text(big) is not texts.text(big)  # over ``largest``: never held
    third = StepRecord(**{**first.__dict__, "key": "other"})
    texts.text(third)  # a third text held: the oldest (``first``'s) goes
    assert texts.text(first) is not made
    assert texts.text(first) == made
