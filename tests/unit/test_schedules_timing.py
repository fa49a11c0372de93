"""Schedules, pure: cron parsing, next firings in a zone across DST, intervals, and the catch-up bound."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from treadle.core.errors import BadRequest
from treadle.core.schedules.catchup import decide
from treadle.core.schedules.cron import parse
from treadle.core.schedules.timing import CronTiming, IntervalTiming, timing, upcoming, zone_of

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def cron_in(expression: str, zone: ZoneInfo) -> CronTiming:
    return CronTiming(parse(expression), zone)


def test_fields_ranges_steps_lists_and_names() -> None:
    cron = parse("*/15 9-17/4 1,15 jan-mar mon-fri")
    assert cron.minutes == {0, 15, 30, 45}
    assert cron.hours == {9, 13, 17}
    assert cron.days == {1, 15}
    assert cron.months == {1, 2, 3}
    assert cron.weekdays == {1, 2, 3, 4, 5}
    assert parse("0 0 * * 7").weekdays == {0}  # 7 is Sunday too
    assert parse("5/20 * * * *").minutes == {5, 25, 45}
    assert parse("@weekly").weekdays == {0}


@pytest.mark.parametrize(
    "expression",
    [
        "",
        "* * * *",
        "* * * * * *",
        "60 * * * *",
        "* 24 * * *",
        "*/0 * * * *",
        "5-1 * * * *",
        "x * * * *",
        "* * 31 2 *",
        "0 0 * * 8",
        "-1 * * * *",
        "1-2-3 * * * *",
        "*" * 200,
    ],
)
def test_bad_cron_is_a_typed_error(expression: str) -> None:
    with pytest.raises(BadRequest) as refused:
        parse(expression)
    assert refused.value.code == "invalid_cron"


@pytest.mark.parametrize("name", ["Mars/Olympus", "", "../../etc/passwd", "/etc/localtime", "Europe/" + "x" * 80])
def test_unknown_zone_is_a_typed_error(name: str) -> None:
    with pytest.raises(BadRequest) as refused:
        zone_of(name)
    assert refused.value.code == "invalid_timezone"


def test_interval_bounds_and_exactly_one_kind() -> None:
    anchor = datetime(2026, 1, 1, tzinfo=UTC)
    with pytest.raises(BadRequest) as low:
        timing(cron=None, timezone="UTC", interval_seconds=59, anchor=anchor)
    assert low.value.code == "invalid_interval"
    for cron, interval in ((None, None), ("* * * * *", 60)):
        with pytest.raises(BadRequest) as both:
            timing(cron=cron, timezone="UTC", interval_seconds=interval, anchor=anchor)
        assert both.value.code == "invalid_schedule"


def test_interval_fires_on_its_anchor_grid() -> None:
    anchor = datetime(2026, 1, 1, 12, tzinfo=UTC)
    every = IntervalTiming(90, anchor)
    assert every.after(anchor) == anchor + timedelta(seconds=90)
    assert every.after(anchor + timedelta(seconds=100)) == anchor + timedelta(seconds=180)
    assert every.after(anchor - timedelta(days=1)) == anchor + timedelta(seconds=90)


def test_spring_forward_skipped_time_fires_once_at_the_next_valid_time() -> None:
    # Berlin, 29 Mar 2026: 02:00 CET becomes 03:00 CEST; 02:30 does not exist.
    daily = cron_in("30 2 * * *", BERLIN)
    before = datetime(2026, 3, 28, 12, tzinfo=BERLIN)
    times = upcoming(daily, before, 3)
    assert [t.astimezone(BERLIN).strftime("%d %H:%M") for t in times] == ["29 03:00", "30 02:30", "31 02:30"]
    every_quarter = cron_in("*/15 2-3 29 3 *", BERLIN)
    night = upcoming(every_quarter, datetime(2026, 3, 29, 0, tzinfo=BERLIN), 5)[:4]  # the 5th: next year
    assert [t.astimezone(BERLIN).strftime("%H:%M") for t in night] == ["03:00", "03:15", "03:30", "03:45"]


def test_fall_back_repeated_time_fires_once() -> None:
    # New York, 1 Nov 2026: 02:00 EDT becomes 01:00 EST; 01:30 happens twice.
    daily = cron_in("30 1 * * *", NEW_YORK)
    times = upcoming(daily, datetime(2026, 10, 31, 12, tzinfo=NEW_YORK), 3)
    assert [t.astimezone(NEW_YORK).strftime("%d %H:%M %Z") for t in times] == [
        "01 01:30 EDT",
        "02 01:30 EST",
        "03 01:30 EST",
    ]
    assert times[1] - times[0] == timedelta(hours=25)


def test_day_of_month_or_weekday_when_both_are_restricted() -> None:
    either = cron_in("0 0 13 * fri", ZoneInfo("UTC"))
    first = either.after(datetime(2026, 2, 1, tzinfo=UTC))
    assert first == datetime(2026, 2, 6, tzinfo=UTC)  # a Friday before the 13th


_field = st.one_of(
    st.just("*"),
    st.integers(0, 5).map(str),
    st.tuples(st.integers(0, 3), st.integers(4, 9)).map(lambda r: f"{r[0]}-{r[1]}"),
    st.integers(1, 7).map(lambda n: f"*/{n}"),
)


@settings(max_examples=60, deadline=None)
@given(
    minute=_field,
    hour=_field,
    weekday=st.sampled_from(["*", "mon", "1-5", "0,6"]),
    start=st.datetimes(min_value=datetime(2025, 1, 1), max_value=datetime(2027, 1, 1)),
)
def test_next_firing_matches_and_nothing_matches_before_it(
    minute: str, hour: str, weekday: str, start: datetime
) -> None:
    cron = parse(f"{minute} {hour} * * {weekday}")
    moment = start.replace(tzinfo=UTC)
    fired = CronTiming(cron, ZoneInfo("UTC")).after(moment)
    assert fired is not None and fired > moment
    naive = fired.replace(tzinfo=None)
    assert naive.minute in cron.minutes and naive.hour in cron.hours and cron.day_matches(naive)
    probe = moment.replace(second=0, microsecond=0) + timedelta(minutes=1)
    while probe < fired and probe - moment < timedelta(days=3):  # brute force over the first days of the gap
        p = probe.replace(tzinfo=None)
        assert not (p.minute in cron.minutes and p.hour in cron.hours and cron.day_matches(p))
        probe += timedelta(minutes=1)


@settings(max_examples=40, deadline=None)
@given(
    expression=st.sampled_from(["*/5 * * * *", "30 2 * * *", "0 */3 * * sun", "15 1 * * *"]),
    start=st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2027, 12, 1)),
)
def test_firings_strictly_increase_across_dst(expression: str, start: datetime) -> None:
    times = upcoming(cron_in(expression, BERLIN), start.replace(tzinfo=UTC), 30)
    assert len(times) == 30 and all(a < b for a, b in zip(times, times[1:], strict=False))


def test_catch_up_fires_the_latest_missed_firing_within_the_window_once() -> None:
    anchor = datetime(2026, 1, 1, tzinfo=UTC)
    every = IntervalTiming(60, anchor)
    due = anchor + timedelta(seconds=60)
    assert decide(every, due, due - timedelta(seconds=1), timedelta(minutes=10)) is None
    on_time = decide(every, due, due + timedelta(seconds=2), timedelta(minutes=10))
    assert on_time is not None and (on_time.fire_at, on_time.skipped) == (due, 0)
    assert on_time.next_at == due + timedelta(seconds=60)
    late = decide(every, due, due + timedelta(seconds=300), timedelta(minutes=10))
    assert late is not None and late.fire_at == due + timedelta(seconds=300) and late.skipped == 5


def test_catch_up_skips_firings_older_than_the_window() -> None:
    anchor = datetime(2026, 1, 1, tzinfo=UTC)
    daily = cron_in("0 9 * * *", ZoneInfo("UTC"))
    due = datetime(2026, 1, 1, 9, tzinfo=UTC)
    now = datetime(2026, 1, 3, 12, tzinfo=UTC)  # three 09:00s missed, the latest 3 hours ago
    stale = decide(daily, due, now, timedelta(hours=1))
    assert stale is not None and stale.fire_at is None and stale.skipped == 3
    assert stale.next_at == datetime(2026, 1, 4, 9, tzinfo=UTC)
    far = decide(
        IntervalTiming(60, anchor), anchor + timedelta(seconds=60), anchor + timedelta(days=30), timedelta(minutes=5)
    )
    assert far is not None and far.fire_at == anchor + timedelta(days=30) and far.skipped == 10_000


@settings(max_examples=80, deadline=None)
@given(
    seconds=st.integers(60, 7200),
    steps=st.integers(0, 300),
    extra=st.integers(0, 7199),
    window=st.integers(0, 20_000),
)
def test_interval_catch_up_counted_equals_the_firings_walked(seconds: int, steps: int, extra: int, window: int) -> None:
    anchor = datetime(2026, 1, 1, tzinfo=UTC)
    every = IntervalTiming(seconds, anchor)
    due = anchor + timedelta(seconds=seconds)
    now = due + timedelta(seconds=steps * seconds + extra % seconds)
    walked = [due]
    while (following := every.after(walked[-1])) is not None and following <= now:
        walked.append(following)
    decision = decide(every, due, now, timedelta(seconds=window))
    assert decision is not None
    in_window = now - walked[-1] <= timedelta(seconds=window)
    assert decision.fire_at == (walked[-1] if in_window else None)
    assert decision.skipped == len(walked) - (1 if in_window else 0)
    assert decision.next_at == every.after(now)
