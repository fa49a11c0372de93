"""Fair share of provider capacity (L9.3): placing a session on a host, starting a turn on it.

A full host makes room by releasing an idle session of the tenant holding the most sessions (its least
recently used first) rather than stranding another tenant's run; a released provider thread resumes later,
as after an idle reap. Per-tenant limits cap live sessions and concurrent runs across hosts. What cannot be
placed now is refused with a reason the run waits under (``capacity``, ``tenant_quota``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Final, Literal

import msgspec

CAPACITY: Final = "capacity"
TENANT_QUOTA: Final = "tenant_quota"
WaitReason = Literal["capacity", "tenant_quota"]


class SessionLoad(msgspec.Struct, frozen=True, kw_only=True):
    """A live session on this host as the placement sees it."""

    session_id: str
    tenant: str
    busy: bool  # a turn plays on it (a pending approval or question keeps its turn playing)
    last_active: float  # on the host's clock


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    capacity: int  # live sessions on this host
    tenant_sessions: int = 0  # live sessions of one tenant across hosts (0: no limit)
    tenant_runs: int = 0  # turns playing for one tenant across hosts (0: no limit)
    grace: float = 0.0  # a session touched this recently is not released (it may be about to start a turn)


class Peers(msgspec.Struct, frozen=True, kw_only=True):
    """Per-tenant counts on the other hosts, from their latest heartbeats."""

    sessions: dict[str, int] = {}  # live sessions
    busy: dict[str, int] = {}  # sessions with a turn playing
    idle: int = 0  # sessions with no turn playing on the other hosts of this volume
    hosts: int = 0  # other hosts of this volume
    staleness: float = 0.0  # how old their counts may be (a heartbeat period)


# A tenant refused for capacity keeps a claim on the next room this long: held runs of all tenants wake together
# when room frees, and the one holding fewer sessions goes first.
FAIR_WINDOW = 2.0
ELSEWHERE_RETRY = 0.2  # seconds before asking again when another host may have an idle session to release


class Admit(msgspec.Struct, frozen=True):
    release: tuple[str, ...] = ()  # sessions to release first, to make room


class Refuse(msgspec.Struct, frozen=True):
    reason: WaitReason
    message: str
    retry_after: float | None = None  # seconds until an idle session here passes its grace time


def place(
    sessions: Sequence[SessionLoad],
    opening: int,
    tenant: str,
    peers: Peers,
    limits: Limits,
    now: float,
    waiting: Collection[str] = (),
) -> Admit | Refuse:
    """Whether a new session of ``tenant`` may open on this host, and what to release first. ``opening``:
    placements in progress here; ``waiting``: tenants refused for capacity here within ``FAIR_WINDOW``. A
    session is placed for a turn to play at once, so a tenant at its run limit gets none (it would only sit
    idle, and releasing sessions for it would churn)."""
    own = [s for s in sessions if s.tenant == tenant]
    refused = start_turn(sum(1 for s in own if s.busy), peers.busy.get(tenant, 0), tenant, limits)
    if refused is not None:
        return refused
    elsewhere = peers.sessions
    if limits.tenant_sessions and len(own) + elsewhere.get(tenant, 0) >= limits.tenant_sessions:
        # Over its own share: the tenant's least recently used idle session here makes room, else it waits.
        mine = _releasable(own, limits, now)
        if mine:
            return Admit(release=(mine[0].session_id,))
        soonest = _soonest(own, limits, now)
        if peers.sessions.get(tenant, 0) > peers.busy.get(tenant, 0) and (soonest is None or soonest > ELSEWHERE_RETRY):
            # One of its sessions on another host is idle: asked again, that host may release it.
            return Refuse(
                TENANT_QUOTA,
                f"tenant {tenant} holds {limits.tenant_sessions} live sessions, idle ones only on other hosts",
                ELSEWHERE_RETRY,
            )
        return Refuse(
            TENANT_QUOTA, f"tenant {tenant} holds {limits.tenant_sessions} live sessions, none idle here", soonest
        )
    held = _held(sessions, elsewhere)
    lighter = sorted(w for w in waiting if w != tenant and held.get(w, 0) < held.get(tenant, 0))
    if lighter and limits.capacity - len(sessions) - opening <= len(lighter):
        return Refuse(
            CAPACITY,
            f"room here goes first to waiting tenants holding fewer sessions ({', '.join(lighter)})",
            FAIR_WINDOW,
        )
    if len(sessions) + opening < limits.capacity:
        return Admit()
    victim = shed(sessions, elsewhere, limits, now)
    if victim is None:
        soonest = _soonest(sessions, limits, now)
        # Shedding requests go to any host of the volume: asked again, another one may take it. One that reported
        # only busy sessions may have idle ones by now (a turn ended since its last heartbeat).
        again = ELSEWHERE_RETRY if peers.idle else peers.staleness if peers.hosts else None
        if again is not None and (soonest is None or soonest > again):
            return Refuse(
                CAPACITY, f"all {limits.capacity} sessions here are busy; another host may have idle ones", again
            )
        return Refuse(CAPACITY, f"all {limits.capacity} sessions are busy or just used", soonest)
    return Admit(release=(victim,))


def shed(sessions: Sequence[SessionLoad], elsewhere: Mapping[str, int], limits: Limits, now: float) -> str | None:
    """The idle session to release on a full host: of the tenant holding the most sessions (across hosts),
    its least recently used. None: every session is busy or was just used."""
    idle = _releasable(sessions, limits, now)
    if not idle:
        return None
    held = _held(sessions, elsewhere)
    busiest = max(idle, key=lambda s: (held[s.tenant], -s.last_active))
    return busiest.session_id


def start_turn(busy_here: int, busy_elsewhere: int, tenant: str, limits: Limits) -> Refuse | None:
    """A turn of ``tenant`` may start unless the tenant already plays ``tenant_runs`` turns across hosts."""
    if limits.tenant_runs and busy_here + busy_elsewhere >= limits.tenant_runs:
        return Refuse(TENANT_QUOTA, f"tenant {tenant} runs {limits.tenant_runs} turns at once")
    return None


def _releasable(sessions: Sequence[SessionLoad], limits: Limits, now: float) -> list[SessionLoad]:
    """Idle sessions past the grace time, least recently used first."""
    return sorted(
        (s for s in sessions if not s.busy and now - s.last_active >= limits.grace), key=lambda s: s.last_active
    )


def _soonest(sessions: Sequence[SessionLoad], limits: Limits, now: float) -> float | None:
    """When the first idle session still within its grace time may be released; None: none is idle."""
    waits = [limits.grace - (now - s.last_active) for s in sessions if not s.busy]
    return max(min(waits), 0.0) if waits else None


def _held(sessions: Sequence[SessionLoad], elsewhere: Mapping[str, int]) -> dict[str, int]:
    """Live sessions per tenant across hosts."""
    held = dict(elsewhere)
    for s in sessions:
        held[s.tenant] = held.get(s.tenant, 0) + 1
    return held
