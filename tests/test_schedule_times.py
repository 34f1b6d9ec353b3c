"""The time math of schedules: checked timing, next and latest fires, run ids."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine_core import InvalidScheduleError
from engine_core.schedules.times import (
    ScheduleSpec,
    fire_run_id,
    latest_fire,
    make_spec,
    next_fire,
)

CRONS = [
    "0 3 * * *",
    "30 3 * * *",
    "*/5 * * * *",
    "0 * * * *",
    "15 2,3,4 * * 0",
    "0 0 1 * *",
    "0 12 * * 1-5",
    "*/20 * * * * *",
]
ZONES = ["UTC", "Europe/Helsinki", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]
# Moments around 2026, DST changes included (Helsinki: 29 March and 25 October).
MOMENTS = st.datetimes(
    min_value=datetime(2025, 12, 1), max_value=datetime(2027, 2, 1), timezones=st.just(UTC)
)
NEAR_DST = st.builds(
    lambda base, offset: base + timedelta(seconds=offset),
    st.sampled_from(
        [datetime(2026, 3, 29, 0, 0, tzinfo=UTC), datetime(2026, 10, 25, 0, 0, tzinfo=UTC)]
    ),
    st.integers(min_value=-3 * 3600, max_value=5 * 3600),
)


def specs() -> st.SearchStrategy[ScheduleSpec]:
    crons = st.builds(
        lambda c, z: make_spec(cron=c, timezone=z), st.sampled_from(CRONS), st.sampled_from(ZONES)
    )
    everys = st.builds(
        lambda n, z: make_spec(every=n, timezone=z),
        st.sampled_from([1, 7, 30, 60, 3600, 86400, 90061]),
        st.sampled_from(ZONES),
    )
    return st.one_of(crons, everys)


def _check(spec: ScheduleSpec, moment: datetime) -> None:
    nxt = next_fire(spec, moment)
    latest = latest_fire(spec, moment)
    assert nxt > moment
    assert latest is not None and latest <= moment
    # No fire strictly between the two: the fire after the latest is the next one.
    assert next_fire(spec, latest) == nxt
    assert latest_fire(spec, nxt - timedelta(microseconds=1)) == latest
    assert latest_fire(spec, nxt) == nxt
    assert nxt.tzinfo is not None and nxt.utcoffset() == timedelta(0)


@settings(max_examples=300, deadline=None)
@given(specs(), MOMENTS)
def test_next_and_latest_bracket_every_moment(spec: ScheduleSpec, moment: datetime) -> None:
    _check(spec, moment)


@settings(max_examples=300, deadline=None)
@given(specs(), NEAR_DST)
def test_the_invariants_hold_across_daylight_saving_changes(
    spec: ScheduleSpec, moment: datetime
) -> None:
    _check(spec, moment)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from([1, 5, 60, 3600]), MOMENTS)
def test_every_fires_at_multiples_of_the_interval_since_the_epoch(
    seconds: int, moment: datetime
) -> None:
    spec = make_spec(every=f"{seconds}s", timezone="Europe/Helsinki")
    for fire in (next_fire(spec, moment), latest_fire(spec, moment)):
        assert fire is not None
        assert fire.timestamp() % seconds == 0 and fire.microsecond == 0


def test_a_cron_fires_at_local_time_across_dst() -> None:
    helsinki = ZoneInfo("Europe/Helsinki")
    spec = make_spec(cron="0 3 * * *", timezone="Europe/Helsinki")
    fire = datetime(2026, 3, 27, tzinfo=UTC)
    seen = []
    for _ in range(4):
        fire = next_fire(spec, fire)
        seen.append(fire.astimezone(helsinki))
    # 29 March: 03:00 does not exist (clocks go 03:00 -> 04:00); cron fires at 04:00.
    assert [(f.day, f.hour) for f in seen] == [(27, 3), (28, 3), (29, 4), (30, 3)]
    assert seen[0].utcoffset() == timedelta(hours=2) and seen[3].utcoffset() == timedelta(hours=3)
    # 25 October: 03:00-04:00 happens twice; cron fires once.
    autumn = datetime(2026, 10, 24, 12, tzinfo=UTC)
    fires = [next_fire(spec, autumn)]
    fires.append(next_fire(spec, fires[-1]))
    assert [f.astimezone(helsinki).day for f in fires] == [25, 26]


def test_run_ids_are_utc_to_the_second() -> None:
    moment = datetime(2026, 12, 3, 3, 0, 0, 999_999, tzinfo=ZoneInfo("Europe/Helsinki"))
    assert fire_run_id("nightly", moment) == "nightly@2026-12-03T01:00:00Z"


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"cron": "0 3 * * *", "every": "1s"},
        {"cron": "not cron"},
        {"cron": "61 * * * *"},
        {"cron": "0 0 31 2 *"},
        {"cron": ""},
        {"cron": 5},
        {"cron": "* * * * *", "timezone": "Mars/Olympus"},
        {"cron": "* * * * *", "timezone": ""},
        {"cron": "* * * * *", "timezone": "../../etc/passwd"},
        {"every": 0},
        {"every": "-1s"},
        {"every": "0.5s"},
        {"every": 1.5},
        {"every": "soon"},
        {"every": True},
        {"every": float("nan")},
    ],
)
def test_bad_timings_raise(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidScheduleError) as caught:
        make_spec(**kwargs)
    assert isinstance(caught.value, ValueError)


def test_good_timings() -> None:
    assert make_spec(every="30s").every == 30.0
    assert make_spec(every=60).every == 60.0
    assert make_spec(cron="0  3 * * *", timezone="Europe/Helsinki").cron == "0 3 * * *"
