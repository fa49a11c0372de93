"""A 5-field cron expression (minute hour day-of-month month day-of-week): numbers, ``*``, ranges ``a-b``, steps
``*/n`` ``a-b/n`` ``a/n``, lists ``a,b``, month and weekday names (``jan``, ``mon``), 0 and 7 both Sunday, and the
macros ``@hourly`` ``@daily`` ``@weekly`` ``@monthly`` ``@yearly``. As in Vixie cron, when both day fields are
restricted a day matches either of them. It matches naive wall-clock minutes; the zone is ``timing``'s business."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from treadle.core.errors import BadRequest

MAX_EXPRESSION_CHARS = 120
_MONTHS = {m: i + 1 for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split())}
_DAYS = {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())}
_MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day", 1, 31, {}),
    ("month", 1, 12, _MONTHS),
)
_DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # a leap year's: 29 Feb can match


def bad_cron(expression: str, why: str) -> BadRequest:
    return BadRequest(f"cron {expression!r}: {why}", code="invalid_cron", details={"field": "cron", "why": why})


@dataclass(frozen=True)
class Cron:
    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool  # day-of-month was ``*``
    any_weekday: bool

    def day_matches(self, moment: datetime) -> bool:
        weekday = (moment.weekday() + 1) % 7
        by_day, by_weekday = moment.day in self.days, weekday in self.weekdays
        if not self.any_day and not self.any_weekday:
            return by_day or by_weekday
        return by_day and by_weekday

    def next_naive(self, start: datetime) -> datetime | None:
        """The first wall-clock minute at or after ``start`` (naive, whole minute) that matches; None past 5 years."""
        moment = start.replace(second=0, microsecond=0)
        if moment < start:
            moment += timedelta(minutes=1)
        limit = moment + timedelta(days=5 * 366)  # 29 Feb comes round within 8 years
        while moment < limit:
            if moment.month not in self.months:
                year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
                moment = datetime(year, month, 1)
            elif not self.day_matches(moment):
                moment = datetime(moment.year, moment.month, moment.day) + timedelta(days=1)
            elif moment.hour not in self.hours:
                moment = moment.replace(minute=0) + timedelta(hours=1)
            elif moment.minute not in self.minutes:
                moment += timedelta(minutes=1)
            else:
                return moment
        return None


def _value(expression: str, token: str, low: int, high: int, names: dict[str, int]) -> int:
    lowered = token.lower()
    if lowered in names:
        return names[lowered]
    if not token.isdigit():
        raise bad_cron(expression, f"{token!r} is not a number or a name")
    value = int(token)
    if not low <= value <= high:
        raise bad_cron(expression, f"{value} is outside {low}-{high}")
    return value


def _field(expression: str, text: str, low: int, high: int, names: dict[str, int]) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        base, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise bad_cron(expression, f"step {step_text!r} is not a positive number")
            step = int(step_text)
        if base == "*":
            first, last = low, high
        elif "-" in base:
            a, _, b = base.partition("-")
            first, last = _value(expression, a, low, high, names), _value(expression, b, low, high, names)
            if first > last:
                raise bad_cron(expression, f"range {base!r} runs backwards")
        else:
            first = _value(expression, base, low, high, names)
            last = high if step_text else first
        values.update(range(first, last + 1, step))
    return frozenset(values)


def parse(expression: str) -> Cron:
    """The expression, or ``BadRequest`` ``invalid_cron`` saying which part is wrong."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise bad_cron(expression[:MAX_EXPRESSION_CHARS], f"longer than {MAX_EXPRESSION_CHARS} characters")
    text = _MACROS.get(expression.strip().lower(), expression)
    fields = text.split()
    if len(fields) != 5:
        raise bad_cron(expression, f"has {len(fields)} fields; 5 are needed (minute hour day month weekday)")
    minutes, hours, days, months = (
        _field(expression, fields[i], low, high, names) for i, (_, low, high, names) in enumerate(_FIELDS)
    )
    weekdays = frozenset(d % 7 for d in _field(expression, fields[4], 0, 7, _DAYS))
    cron = Cron(
        expression=expression,
        minutes=minutes,
        hours=hours,
        days=days,
        months=months,
        weekdays=weekdays,
        any_day=fields[2].startswith("*"),
        any_weekday=fields[4].startswith("*"),
    )
    if cron.any_weekday and not any(d <= _DAYS_IN_MONTH[m - 1] for m in months for d in days):
        raise bad_cron(expression, "no month has such a day")
    return cron
