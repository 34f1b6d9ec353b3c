"""Shaping what the Engine returns into what the templates draw: folded JSON values,
times and durations, and the attempts timeline (one bar per attempt on a time axis,
waits as thin bars), all computed here so the templates stay plain."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from engine_core import RunStatus, TimelineEntry
from engine_core.records import TERMINAL

# ---- values -------------------------------------------------------------------------

#: A value whose pretty JSON is longer than this many lines or characters is folded.
FOLD_LINES = 12
FOLD_CHARS = 600
#: At most this many characters of a value are shown (values may be up to 256 MiB).
MAX_SHOWN = 200_000


@dataclass(frozen=True)
class ShownValue:
    """A JSON value as the page shows it: pretty text, folded when long."""

    text: str
    summary: str
    lines: int
    folded: bool
    truncated: bool


def show_value(value: Any) -> ShownValue:
    """``value`` as indented JSON, with a one-line summary for when it is folded."""
    text = json.dumps(value, indent=2, ensure_ascii=False)
    compact = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    truncated = len(text) > MAX_SHOWN
    if truncated:
        text = text[:MAX_SHOWN]
    lines = text.count("\n") + 1
    summary = compact if len(compact) <= 100 else compact[:99] + "…"
    folded = lines > FOLD_LINES or len(text) > FOLD_CHARS
    return ShownValue(text, summary, lines, folded, truncated)


def error_text(error: dict[str, Any] | None) -> str:
    """``Type: message`` of a stored error, or ``""``."""
    if not error:
        return ""
    return f"{error.get('type', 'Error')}: {error.get('message', '')}"


# ---- times --------------------------------------------------------------------------


def fmt_time(moment: datetime | None) -> str:
    """A time to the second, in UTC."""
    return "-" if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def fmt_clock(moment: datetime) -> str:
    """A time of day to the millisecond, in UTC."""
    moment = moment.astimezone(UTC)
    return f"{moment:%H:%M:%S}.{moment.microsecond // 1000:03d}"


def fmt_duration(seconds: float) -> str:
    """A duration, in the unit that suits it."""
    if seconds < 0.001:
        return "< 1 ms"  # the stored times are to the millisecond
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.2f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60)} s"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"
    return f"{int(seconds // 86400)} d {int(seconds % 86400 // 3600)} h"


def fmt_interval(seconds: float) -> str:
    """A schedule's interval (whole seconds) as people say it: ``30 s``, ``5 min``,
    ``1 h 30 min``, ``2 d``; no zero parts, no decimals."""
    left = round(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if left >= size:
            parts.append(f"{left // size} {unit}")
            left %= size
    return " ".join(parts) or "0 s"


def fmt_relative(moment: datetime | None, now: datetime | None = None) -> str:
    """How far ``moment`` is from now: ``in 4 min 10 s``, ``12 s ago``, ``now``."""
    if moment is None:
        return "-"
    seconds = (moment - (now or datetime.now(UTC))).total_seconds()
    if abs(seconds) < 1:
        return "now"
    whole = round(abs(seconds))
    took = f"{whole} s" if whole < 60 else fmt_duration(whole)
    return f"in {took}" if seconds > 0 else f"{took} ago"


# ---- the timeline -------------------------------------------------------------------


#: A wait's tooltip, by how it ended (``{took}``: how long it lasted, so far).
_WAITED = {
    "waiting": "waiting, {took} so far",
    "stopped": "waited {took}; the run ended first",
    "waited": "waited {took}, then ran",
}


@dataclass(frozen=True)
class Span:
    """One attempt of a step (``kind="attempt"``), or a time it waited (``"wait"``: a
    sleep, an event, a child run, a queued dispatch or a retry delay)."""

    index: int
    step: str
    attempt: int
    kind: str
    start: datetime
    end: datetime
    #: succeeded, failed, running (still), waiting (still), stopped (the run ended
    #: first), lost (a new attempt began without an outcome) or waited (then ran).
    outcome: str
    error: dict[str, Any] | None = None

    @property
    def seconds(self) -> float:
        """How long the attempt or the wait took (so far)."""
        return max(0.0, (self.end - self.start).total_seconds())

    @property
    def describe(self) -> str:
        """The bar's tooltip."""
        took = fmt_duration(self.seconds)
        if self.kind == "wait":
            head = (
                f"{self.step}: {_WAITED.get(self.outcome, 'waited {took}, then ' + self.outcome)}"
            )
            head = head.format(took=took)
        else:
            head = f"{self.step}, attempt {self.attempt}: {self.outcome} after {took}"
        text = error_text(self.error)
        return f"{head}\n{text}" if text else head


@dataclass(frozen=True)
class Bar:
    """A span drawn: its rectangle and CSS classes (kind and outcome)."""

    span: Span
    x: float
    y: float
    width: float
    height: float
    css: str


@dataclass(frozen=True)
class Lane:
    """A step's row: its name, the label drawn (shortened) and its top."""

    step: str
    label: str
    y: float


@dataclass(frozen=True)
class Tick:
    """A mark on the time axis, labelled with the time since the axis began."""

    x: float
    label: str


@dataclass(frozen=True)
class Timeline:
    """The timeline's geometry (an SVG ``viewBox`` of ``width`` x ``height``)."""

    width: int
    height: int
    lanes: list[Lane]
    bars: list[Bar]
    ticks: list[Tick]
    spans: list[Span]
    start: datetime | None
    now_x: float | None
    omitted: int


WIDTH = 1000
LABEL_WIDTH = 190
RIGHT_PAD = 20
TOP = 30
ROW = 26
BAR_HEIGHT = 16
WAIT_HEIGHT = 6
MIN_BAR = 3.0
#: Steps beyond this many are listed in the attempts table but not drawn.
MAX_LANES = 150


def spans_of(history: Sequence[TimelineEntry], *, end: datetime, active: bool) -> list[Span]:
    """The attempts and waits in a run's history, by start time. ``end`` closes what is
    still open: now for a run that has not ended, else when it ended."""
    found: list[Span] = []

    def add(
        step: str,
        attempt: int,
        kind: str,
        start: datetime,
        stop: datetime,
        outcome: str,
        error: dict[str, Any] | None = None,
    ) -> None:
        found.append(Span(0, step, attempt, kind, start, max(start, stop), outcome, error))

    by_step: dict[str, list[TimelineEntry]] = {}
    for entry in history:
        by_step.setdefault(entry.step, []).append(entry)
    for step, entries in by_step.items():
        wait: TimelineEntry | None = None  # a "scheduled" entry not yet followed up
        attempt: TimelineEntry | None = None  # a "running" entry without its outcome
        for entry in entries:
            if entry.status in ("scheduled", "running") and wait is not None:
                add(step, wait.attempt, "wait", wait.at, entry.at, "waited")
                wait = None
            if entry.status == "scheduled":
                wait = entry
            elif entry.status == "running":
                if attempt is not None:
                    add(step, attempt.attempt, "attempt", attempt.at, entry.at, "lost")
                attempt = entry
            elif entry.status in ("succeeded", "failed"):
                opened = attempt or wait
                kind = "wait" if attempt is None and wait is not None else "attempt"
                began = opened.at if opened is not None else entry.at
                add(step, entry.attempt, kind, began, entry.at, entry.status, entry.error)
                attempt = wait = None
        if wait is not None:
            add(step, wait.attempt, "wait", wait.at, end, "waiting" if active else "stopped")
        if attempt is not None:
            add(
                step,
                attempt.attempt,
                "attempt",
                attempt.at,
                end,
                "running" if active else "stopped",
            )
    found.sort(key=lambda span: (span.start, span.end))
    return [replace(span, index=i + 1) for i, span in enumerate(found)]


def _tick_label(seconds: float, span: float) -> str:
    if span < 1:
        return f"+{seconds * 1000:.0f} ms"
    if span < 120:
        return f"+{seconds:.1f} s"
    if span < 7200:
        return f"+{seconds / 60:.1f} min"
    return f"+{seconds / 3600:.1f} h"


def build_timeline(
    status: RunStatus, history: Sequence[TimelineEntry], *, now: datetime | None = None
) -> Timeline:
    """The timeline of a run: a lane per step (in the order they first started), a bar
    per attempt and per wait, and a time axis from the run's creation."""
    now = now or datetime.now(UTC)
    active = status.status not in TERMINAL
    end = now if active else (status.updated_at or now)
    spans = spans_of(history, end=end, active=active)
    order = list(dict.fromkeys(span.step for span in spans))  # by first start
    drawn = order[:MAX_LANES]
    lanes = [
        Lane(step, step if len(step) <= 26 else step[:25] + "…", TOP + i * ROW)
        for i, step in enumerate(drawn)
    ]
    height = TOP + max(1, len(lanes)) * ROW + 6
    if not spans:
        return Timeline(WIDTH, height, lanes, [], [], [], None, None, 0)
    starts = [s.start for s in spans]
    if status.created_at is not None:
        starts.append(status.created_at)
    t0 = min(starts)
    t1 = max(max(s.end for s in spans), end if active else t0)
    total = max((t1 - t0).total_seconds(), 0.001)
    plot = WIDTH - LABEL_WIDTH - RIGHT_PAD

    def x_of(moment: datetime) -> float:
        return LABEL_WIDTH + (moment - t0).total_seconds() / total * plot

    y_of = {lane.step: lane.y for lane in lanes}
    bars: list[Bar] = []
    for span in spans:
        if span.step not in y_of:
            continue
        x = x_of(span.start)
        width = max(MIN_BAR, x_of(span.end) - x)
        x = min(x, WIDTH - RIGHT_PAD - width)
        thick = WAIT_HEIGHT if span.kind == "wait" else BAR_HEIGHT
        y = y_of[span.step] + (ROW - thick) / 2
        css = f"bar {span.kind} {span.outcome}"
        bars.append(Bar(span, round(x, 1), y, round(width, 1), thick, css))
    ticks = [
        Tick(round(LABEL_WIDTH + plot * i / 5, 1), _tick_label(total * i / 5, total))
        for i in range(6)
    ]
    now_x = round(x_of(now), 1) if active and now <= t1 else None
    return Timeline(WIDTH, height, lanes, bars, ticks, spans, t0, now_x, len(order) - len(drawn))
