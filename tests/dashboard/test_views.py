"""How the dashboard shapes the Engine's answers: the timeline's spans and geometry,
folded values, durations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from engine_core import RunStatus, StepStatus, TimelineEntry
from pikku_mongo.dashboard.views import (
    MAX_LANES,
    build_timeline,
    fmt_duration,
    fmt_relative,
    show_value,
    spans_of,
)

T0 = datetime(2026, 12, 2, 10, 0, 0, tzinfo=UTC)


def at(ms: float) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def entry(step: str, attempt: int, status: str, ms: float, **kw: Any) -> TimelineEntry:
    return TimelineEntry(step, attempt, status, at(ms), **kw)


def run(status: str = "completed", steps: dict[str, StepStatus] | None = None) -> RunStatus:
    return RunStatus("r", "wf", status, None, None, steps or {}, created_at=T0, updated_at=at(1000))


def test_attempts_retries_and_waits_become_spans() -> None:
    boom = {"type": "ConnectionError", "message": "gateway timeout"}
    history = [
        entry("charge", 1, "running", 0),
        entry("charge", 1, "failed", 10, error=boom),
        entry("charge", 2, "running", 20),
        entry("charge", 2, "succeeded", 25),
        entry("nap", 0, "scheduled", 30),
        entry("nap", 1, "succeeded", 530),
        entry("mail", 0, "scheduled", 540),  # a dispatched step: queued, claimed, run
        entry("mail", 1, "running", 600),
        entry("mail", 1, "succeeded", 650),
    ]
    spans = spans_of(history, end=at(1000), active=False)
    shape = [(s.step, s.attempt, s.kind, s.outcome, s.seconds) for s in spans]
    assert shape == [
        ("charge", 1, "attempt", "failed", 0.01),
        ("charge", 2, "attempt", "succeeded", 0.005),
        ("nap", 1, "wait", "succeeded", 0.5),
        ("mail", 0, "wait", "waited", 0.06),
        ("mail", 1, "attempt", "succeeded", 0.05),
    ]
    assert [s.index for s in spans] == [1, 2, 3, 4, 5]
    assert spans[0].error == boom
    assert "charge, attempt 1: failed after 10 ms\nConnectionError: gateway timeout" == (
        spans[0].describe
    )
    assert spans[2].describe == "nap: waited 500 ms, then succeeded"


def test_open_spans_run_to_now_or_stop_with_the_run() -> None:
    history = [entry("work", 1, "running", 0), entry("go", 0, "scheduled", 5)]
    live = spans_of(history, end=at(900), active=True)
    assert [(s.step, s.outcome, s.end) for s in live] == [
        ("work", "running", at(900)),
        ("go", "waiting", at(900)),
    ]
    ended = spans_of(history, end=at(300), active=False)
    assert [s.outcome for s in ended] == ["stopped", "stopped"]
    # An attempt that never recorded an outcome before the next began was lost.
    lost = spans_of(
        [entry("s", 1, "running", 0), entry("s", 2, "running", 50), entry("s", 2, "failed", 60)],
        end=at(100),
        active=False,
    )
    assert [(s.attempt, s.outcome) for s in lost] == [(1, "lost"), (2, "failed")]


def test_timeline_geometry() -> None:
    history = [
        entry("a", 1, "running", 0),
        entry("a", 1, "succeeded", 100),
        entry("b", 0, "scheduled", 100),
        entry("b", 1, "succeeded", 1000),
    ]
    timeline = build_timeline(run(), history)
    assert [lane.step for lane in timeline.lanes] == ["a", "b"]
    assert timeline.start == T0 and timeline.now_x is None
    first, second = timeline.bars
    assert first.css == "bar attempt succeeded" and second.css == "bar wait succeeded"
    assert first.x == 190.0 and second.x + second.width == 980.0
    assert second.height < first.height  # waits are thin
    assert first.y < second.y
    labels = ["+0.0 s", "+0.2 s", "+0.4 s", "+0.6 s", "+0.8 s", "+1.0 s"]
    assert [t.label for t in timeline.ticks] == labels
    assert timeline.height > timeline.lanes[-1].y
    # A bar far too short to see is still drawn a few pixels wide.
    blink = [entry("a", 1, "running", 0), entry("a", 1, "succeeded", 0.01)]
    tiny = build_timeline(
        run(), [*blink, entry("b", 1, "running", 0), entry("b", 1, "succeeded", 1000)]
    )
    assert tiny.bars[0].width >= 3


def test_timeline_of_a_live_run_ends_now() -> None:
    history = [entry("go", 0, "scheduled", 0)]
    now = at(2000)
    timeline = build_timeline(run("running"), history, now=now)
    assert timeline.now_x == 980.0 and timeline.bars[0].css == "bar wait waiting"
    empty = build_timeline(run("running"), [], now=now)
    assert empty.bars == [] and empty.spans == []


def test_many_steps_are_listed_but_not_all_drawn() -> None:
    history = []
    for i in range(MAX_LANES + 10):
        history += [entry(f"s{i}", 1, "running", i), entry(f"s{i}", 1, "succeeded", i + 0.5)]
    timeline = build_timeline(run(), history)
    assert len(timeline.lanes) == MAX_LANES and timeline.omitted == 10
    assert len(timeline.spans) == MAX_LANES + 10


def test_values_fold_when_long() -> None:
    short = show_value({"a": 1})
    assert not short.folded and short.text == '{\n  "a": 1\n}'
    long = show_value({"items": list(range(50))})
    assert long.folded and long.lines > 12 and long.summary.endswith("…")
    assert show_value("x" * 300_000).truncated
    markup = show_value("<script>")
    assert markup.text == '"<script>"'  # escaped by the templates, not here


def test_durations() -> None:
    assert fmt_duration(0.0004) == "< 1 ms"
    assert fmt_duration(0.25) == "250 ms"
    assert fmt_duration(2.5) == "2.50 s"
    assert fmt_duration(125) == "2 min 5 s"
    assert fmt_duration(7260) == "2 h 1 min"
    assert fmt_duration(90000) == "1 d 1 h"


def test_relative_times() -> None:
    assert fmt_relative(None) == "-"
    assert fmt_relative(T0 + timedelta(milliseconds=300), T0) == "now"
    assert fmt_relative(T0 + timedelta(seconds=12.4), T0) == "in 12 s"
    assert fmt_relative(T0 - timedelta(seconds=59.6), T0) == "1 min 0 s ago"
    assert fmt_relative(T0 + timedelta(hours=3, minutes=5), T0) == "in 3 h 5 min"
