"""What the scheduler's pure part costs per tick: the next firing of a cron schedule in a zone, a catch-up
decision after downtime, and one tick's decisions over many due-or-not schedules (the scheduler keeps them in
memory by a KV watch, so a tick is these decisions plus the firings it makes).

    .venv/bin/python bench/schedules.py [--schedules 10000]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from treadle.core.schedules.catchup import decide
from treadle.core.schedules.cron import parse
from treadle.core.schedules.timing import CronTiming, IntervalTiming, Timing

NOW = datetime(2026, 3, 28, 12, tzinfo=UTC)


def per_call(what: Callable[[], object], repeat: int) -> float:
    began = time.perf_counter()
    for _ in range(repeat):
        what()
    return (time.perf_counter() - began) / repeat * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--schedules", type=int, default=10_000)
    args = parser.parse_args()
    berlin = ZoneInfo("Europe/Berlin")
    every_5 = CronTiming(parse("*/5 * * * *"), berlin)
    weekly = CronTiming(parse("0 9 * * mon"), berlin)
    minutely = IntervalTiming(60, NOW)
    print(f"next firing, */5 in Berlin:       {per_call(lambda: every_5.after(NOW), 2000):8.1f} µs")
    print(f"next firing, Mondays 09:00 Berlin: {per_call(lambda: weekly.after(NOW), 2000):8.1f} µs")
    print(f"next firing, every 60 s:          {per_call(lambda: minutely.after(NOW), 20000):8.1f} µs")
    hour, week = timedelta(hours=1), timedelta(days=7)
    due = NOW + timedelta(seconds=60)
    print(f"catch-up, 60 s after 1 h down:    {per_call(lambda: decide(minutely, due, due + hour, hour), 200):8.1f} µs")
    print(f"catch-up, 60 s after 7 days down: {per_call(lambda: decide(minutely, due, due + week, hour), 20):8.1f} µs")
    timings: list[tuple[Timing, datetime]] = [
        (every_5 if i % 2 else minutely, NOW + timedelta(seconds=i % 600)) for i in range(args.schedules)
    ]
    began = time.perf_counter()
    fired = sum(decide(t, next_at, NOW + timedelta(seconds=30), hour) is not None for t, next_at in timings)
    took = (time.perf_counter() - began) * 1e3
    print(f"one tick over {args.schedules} schedules ({fired} due): {took:.1f} ms of decisions")


if __name__ == "__main__":
    main()
