"""What a scheduler does with a schedule whose time has come, maybe long ago (it was down, or the broker was).

Stated bound: of the firings missed since ``due``, at most one fires, the latest, and only when it is at most
``window`` old; every other missed firing is skipped and counted (up to ``COUNT_CAP``). The next firing is the
first after ``now``, so downtime of any length costs one firing at most and no burst.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from .timing import IntervalTiming, Timing

COUNT_CAP = 10_000


@dataclass(frozen=True)
class CatchUp:
    fire_at: datetime | None  # the firing to make now (its planned time: the idempotency key), or none
    skipped: int  # missed firings not made (capped at COUNT_CAP)
    next_at: datetime | None  # the one after ``now``; None: the schedule never fires again


def decide(when: Timing, due: datetime, now: datetime, window: timedelta) -> CatchUp | None:
    """None while ``due`` is still ahead; else which firing to make, how many were skipped, and the next."""
    if due > now:
        return None
    if isinstance(when, IntervalTiming):  # counted, not walked: a week down costs as little as a minute
        missed = int((now - due).total_seconds() // when.seconds)
        latest = due + timedelta(seconds=missed * when.seconds)
        fire = latest if now - latest <= window else None
        skipped = missed if fire is not None else missed + 1
        return CatchUp(fire_at=fire, skipped=min(skipped, COUNT_CAP), next_at=when.after(now))
    latest, missed = due, 0
    moment = due
    while missed < COUNT_CAP:
        following = when.after(moment)
        if following is None or following > now:
            break
        latest, moment, missed = following, following, missed + 1
    else:  # far behind: find the latest firing in the window without walking the whole gap
        recent = when.after(now - window)
        latest = recent if recent is not None and recent <= now else latest
        moment = latest
        while (following := when.after(moment)) is not None and following <= now:
            latest = moment = following
    fire = latest if now - latest <= window else None
    skipped = missed if fire is not None else missed + 1
    return CatchUp(fire_at=fire, skipped=min(skipped, COUNT_CAP), next_at=when.after(now))
