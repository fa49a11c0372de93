"""Where a new thread lives (issue 35): the volume its workspace and provider sessions go to.

Pure: what the volumes announce (their checkpoint service's heartbeat, their provider hosts' heartbeats, an
operator's drain mark) and how many threads the tenant has on each go in, a volume name comes out. The worker
that creates the thread reads the announcements and passes the result to the decision (``Ctx.home``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

# Below this much free disk a volume takes no new thread while another has room (a workspace grows with its runs).
MIN_DISK_FREE = 1 << 30
LOAD_BANDS = 4  # sessions in use / capacity, in quarters: volumes within one band count as equally loaded


class Volume(msgspec.Struct, frozen=True, kw_only=True):
    """One volume as its announcements describe it now."""

    name: str
    checkpoints: bool  # its checkpoint service heartbeats: workspaces can be prepared there
    hosts: int  # live provider hosts mounting it
    capacity: int = 0  # sessions its hosts accept
    live: int = 0  # sessions its hosts hold
    disk_free: int | None = None  # bytes (None: not announced)
    workspaces: int = 0  # workspaces it holds
    draining: bool = False  # an operator asked for no new threads here


def placeable(volume: Volume) -> bool:
    """A new thread could live there: something prepares its workspace and something runs its sessions."""
    return volume.checkpoints and volume.hosts > 0 and not volume.draining


def has_room(volume: Volume) -> bool:
    disk = volume.disk_free is None or volume.disk_free >= MIN_DISK_FREE
    return disk and volume.live < volume.capacity


def load_band(volume: Volume) -> int:
    if volume.capacity <= 0:
        return LOAD_BANDS
    return min(LOAD_BANDS, volume.live * LOAD_BANDS // volume.capacity)


def place(volumes: Iterable[Volume], tenant_threads: Mapping[str, int]) -> str | None:
    """The volume for a tenant's new thread; None when no volume is placeable. Room first (free disk and a free
    session seat), then the load band of its sessions, then the fewest of this tenant's threads (spread, so one
    volume's loss touches few of a tenant's threads), then the fewest workspaces, then the name (deterministic)."""
    candidates = [v for v in volumes if placeable(v)]
    if not candidates:
        return None
    best = min(
        candidates,
        key=lambda v: (not has_room(v), load_band(v), tenant_threads.get(v.name, 0), v.workspaces, v.name),
    )
    return best.name
