"""A tenant's disk budget (issue 36): how much its workspaces and runtime homes may hold, and the rule that
stops it.

This machine's filesystem (ext4 without the ``project`` feature or ``prjquota``) offers no hard per-directory
quota, so the provider host enforces a budget it measures (``treadle.sandbox.disk``): every live session of a
tenant whose usage is over its ceiling is ended with reason ``disk_quota``, and a run playing on it fails with
that reason. The ceiling is the budget, or the usage when the tenant's latest turn started if that was higher:
a tenant over its budget may still run turns (its agent can delete files) but never grow.
"""

from __future__ import annotations

import msgspec

DISK_QUOTA = "disk_quota"
# A scan may cost at most this share of the time between scans (a tenant with many files is checked less often).
SCAN_SHARE = 0.05


class DiskBudget(msgspec.Struct, kw_only=True, frozen=True):
    bytes: int = 0  # allocated bytes (st_blocks: a sparse file counts what it holds); 0: no limit
    files: int = 0  # directory entries (files, directories, links: each takes an inode); 0: no limit

    @property
    def limited(self) -> bool:
        return bool(self.bytes or self.files)


class DiskUsage(msgspec.Struct, kw_only=True, frozen=True):
    bytes: int
    files: int
    complete: bool = True  # False: the scan stopped once it counted more entries than the budget allows


def budget_for(default: DiskBudget, policy_bytes: int | None, policy_files: int | None) -> DiskBudget:
    """The deployment's budget, with what the tenant's policy sets instead."""
    return DiskBudget(
        bytes=default.bytes if policy_bytes is None else policy_bytes,
        files=default.files if policy_files is None else policy_files,
    )


def ceiling(budget: DiskBudget, at_turn_start: DiskUsage | None) -> DiskBudget:
    """What the tenant may hold now: its budget, or what it held when its latest turn started if more."""
    if at_turn_start is None:
        return budget
    return DiskBudget(
        bytes=max(budget.bytes, at_turn_start.bytes) if budget.bytes else 0,
        files=max(budget.files, at_turn_start.files) if budget.files else 0,
    )


def over(usage: DiskUsage, limit: DiskBudget) -> str | None:
    """Why ``usage`` is over ``limit`` (one line the tenant reads), or None."""
    if limit.bytes and usage.bytes > limit.bytes:
        return f"the tenant's workspaces and runtime homes hold {_mib(usage.bytes)}, over its disk budget of {_mib(limit.bytes)}"
    if limit.files and usage.files > limit.files:
        more = "" if usage.complete else "more than "
        return f"the tenant's workspaces and runtime homes hold {more}{usage.files} files, over its budget of {limit.files}"
    return None


def next_check(min_interval: float, scan_seconds: float) -> float:
    return max(min_interval, scan_seconds / SCAN_SHARE)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"
