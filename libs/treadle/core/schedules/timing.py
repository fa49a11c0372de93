"""When a schedule fires: a cron expression read in an IANA time zone, or every ``interval`` seconds from an anchor.

Daylight saving time, stated: a local time the clocks skip (02:30 on the spring-forward night in Europe/Berlin)
fires once, at the first valid time after the gap (03:00); a local time the clocks repeat (02:30 on the
fall-back night) fires once, at its first occurrence. Every firing time is a UTC instant, strictly increasing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from treadle.core.errors import BadRequest

from .cron import Cron, parse

MIN_INTERVAL_SECONDS = 60
MAX_INTERVAL_SECONDS = 366 * 24 * 3600
MAX_ZONE_CHARS = 64


def zone_of(name: str) -> ZoneInfo:
    """The IANA zone, or ``BadRequest`` ``invalid_timezone`` (never a path: zoneinfo refuses those itself)."""
    if not name or len(name) > MAX_ZONE_CHARS or name.startswith(("/", ".")) or ".." in name:
        raise BadRequest(f"unknown time zone {name[:MAX_ZONE_CHARS]!r}", code="invalid_timezone")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise BadRequest(
            f"unknown time zone {name!r}", code="invalid_timezone", details={"field": "timezone"}
        ) from None


def check_interval(seconds: int) -> int:
    if not MIN_INTERVAL_SECONDS <= seconds <= MAX_INTERVAL_SECONDS:
        raise BadRequest(
            f"interval_seconds is {MIN_INTERVAL_SECONDS}..{MAX_INTERVAL_SECONDS}",
            code="invalid_interval",
            details={"field": "interval_seconds", "min": MIN_INTERVAL_SECONDS, "max": MAX_INTERVAL_SECONDS},
        )
    return seconds


def _exists(naive: datetime, zone: ZoneInfo) -> bool:
    aware = naive.replace(tzinfo=zone)
    return aware.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == naive


def _instant(naive: datetime, zone: ZoneInfo) -> datetime:
    """The UTC instant of a wall-clock minute: its first occurrence, or the end of the gap it falls in."""
    moment = naive
    while not _exists(moment, zone):  # a gap is at most a day long (Samoa, 2011)
        moment += timedelta(minutes=1)
    return moment.replace(tzinfo=zone, fold=0).astimezone(UTC)


@dataclass(frozen=True)
class CronTiming:
    cron: Cron
    zone: ZoneInfo

    def after(self, moment: datetime) -> datetime | None:
        """The first firing strictly after ``moment`` (aware), as UTC; None when it never fires again."""
        local = moment.astimezone(self.zone).replace(tzinfo=None)
        candidate = local.replace(second=0, microsecond=0) + timedelta(minutes=1)
        for _ in range(10_000):  # each candidate is a later wall-clock minute; only a fold's hour is passed over
            naive = self.cron.next_naive(candidate)
            if naive is None:
                return None
            instant = _instant(naive, self.zone)
            if instant > moment:
                return instant
            candidate = naive + timedelta(minutes=1)
        return None


@dataclass(frozen=True)
class IntervalTiming:
    seconds: int
    anchor: datetime  # aware: the firings are anchor + k * seconds, k >= 1

    def after(self, moment: datetime) -> datetime | None:
        elapsed = (moment - self.anchor).total_seconds()
        steps = max(0, int(elapsed // self.seconds)) + 1
        return self.anchor + timedelta(seconds=steps * self.seconds)


Timing = CronTiming | IntervalTiming


def timing(*, cron: str | None, timezone: str, interval_seconds: int | None, anchor: datetime) -> Timing:
    """Exactly one of ``cron`` and ``interval_seconds``; typed ``BadRequest`` otherwise."""
    if (cron is None) == (interval_seconds is None):
        raise BadRequest("give exactly one of cron and interval_seconds", code="invalid_schedule")
    if cron is not None:
        return CronTiming(parse(cron), zone_of(timezone))
    assert interval_seconds is not None
    zone_of(timezone)
    return IntervalTiming(check_interval(interval_seconds), anchor)


def upcoming(when: Timing, moment: datetime, count: int) -> list[datetime]:
    """The next ``count`` firings after ``moment``."""
    times: list[datetime] = []
    while len(times) < count:
        following = when.after(moment)
        if following is None:
            break
        times.append(following)
        moment = following
    return times
