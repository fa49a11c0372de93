"""Memory, process and CPU limits of one sandboxed runtime: cgroup v2 where it has the controllers, else
the cgroup v1 hierarchies that exist (memory, pids, cpu), else ``setrlimit`` (RLIMIT_NPROC per tenant uid).

Groups are made under the host process's own group of each hierarchy (``/proc/self/cgroup``), so a
runtime never escapes a limit its host is under, in a group of the provider host's own
(``treadle-sandbox/<host>/<runtime>``), and are removed when the runtime has exited; a host killed before
that leaves them, with whatever still runs in them, and its next start sweeps them (``sweep``).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from .launcher import Limits

ROOT = Path("/sys/fs/cgroup")
GROUP = "treadle-sandbox"
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
CFS_PERIOD_US = 100_000
V1_SHARES_PER_WEIGHT = 1024 / 100  # cpu.shares 1024 is cgroup v2's cpu.weight 100: one ordinary process


@dataclass(frozen=True, slots=True)
class CgroupSupport:
    """What this machine lets the host limit: ``v2`` (a group dir whose subtree has the controllers) or
    ``v1`` (controller -> the host's own group dir in that hierarchy)."""

    v2: Path | None = None
    v2_controllers: frozenset[str] = frozenset()
    v1: dict[str, Path] = field(default_factory=dict)

    def describe(self) -> str:
        if self.v2 is not None:
            return f"cgroup v2 ({', '.join(sorted(self.v2_controllers))}) under {self.v2}"
        if self.v1:
            return "cgroup v1 " + ", ".join(f"{c} ({p})" for c, p in sorted(self.v1.items()))
        return "no writable cgroup: RLIMIT_NPROC only"

    def covers(self) -> set[str]:
        if self.v2 is not None:
            return {c for c in ("memory", "pids", "cpu") if c in self.v2_controllers}
        return set(self.v1)


def _own_groups(text: str) -> dict[str, str]:
    groups = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                groups[controller] = parts[2]
    return groups


def detect(root: Path = ROOT) -> CgroupSupport:
    try:
        own = _own_groups(Path("/proc/self/cgroup").read_text())
    except OSError:
        return CgroupSupport()
    # cgroup v2: the unified hierarchy at the root, or mounted at root/unified (hybrid)
    for mount in (root, root / "unified"):
        if "" in own and (mount / "cgroup.controllers").is_file():
            base = mount / own[""].lstrip("/")
            try:
                available = set((base / "cgroup.controllers").read_text().split())
            except OSError:
                continue
            wanted = available & {"memory", "pids", "cpu"}
            if wanted and _writable(base):
                return CgroupSupport(v2=base, v2_controllers=frozenset(wanted))
    v1: dict[str, Path] = {}
    for controller in ("memory", "pids", "cpu"):
        mount = root / controller
        if controller in own and (mount / "cgroup.procs").is_file():
            base = mount / own[controller].lstrip("/")
            if _writable(base):
                v1[controller] = base
    return CgroupSupport(v1=v1)


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK) and (path / "cgroup.procs").is_file()


@dataclass
class SessionCgroup:
    """The groups of one runtime; ``procs`` are the files its first process writes its pid into."""

    dirs: list[Path] = field(default_factory=list)
    procs: list[str] = field(default_factory=list)

    def remove(self, wait: float = 3.0) -> None:
        """Remove the groups once they are empty: the runtime's own exit is seen before the kernel has torn
        down the rest of its pid namespace, so an rmdir may meet EBUSY for a moment."""
        deadline = time.monotonic() + wait
        for path in reversed(self.dirs):
            while True:
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(0.02)
            for parent in path.parents:  # the host's group, then treadle-sandbox, once no runtime is left in them
                with contextlib.suppress(OSError):
                    parent.rmdir()
                if parent.name == GROUP:
                    break


def _hosts_groups(support: CgroupSupport, host: str) -> list[Path]:
    """The provider host's group in each hierarchy (``host`` "": runtimes directly under treadle-sandbox)."""
    bases = [support.v2] if support.v2 is not None else list(support.v1.values())
    return [base / GROUP / host if host else base / GROUP for base in bases]


def create(support: CgroupSupport, name: str, limits: Limits, host: str = "") -> SessionCgroup:
    """``host``: the provider host's own group under treadle-sandbox (its next life sweeps it)."""
    if not _NAME.match(name) or (host and not _NAME.match(host)):
        raise ValueError(f"bad cgroup name {host!r}/{name!r}")
    group = SessionCgroup()
    if support.v2 is not None:
        parent = _hosts_groups(support, host)[0]
        parent.mkdir(parents=True, exist_ok=True)
        enable = " ".join(f"+{c}" for c in sorted(support.v2_controllers))
        for at in (support.v2, support.v2 / GROUP, parent):
            with contextlib.suppress(OSError):
                (at / "cgroup.subtree_control").write_text(enable)
        path = parent / name
        path.mkdir(exist_ok=True)
        group.dirs.append(path)
        if "cpu" in support.v2_controllers and limits.cpu_weight:
            for tree in {support.v2 / GROUP, parent}:  # the runtimes' tree weighs against the host's processes
                _set(tree, "cpu.weight", limits.cpu_weight, True)
        _set(
            path, "memory.max", limits.memory_mb and limits.memory_mb * 1024 * 1024, "memory" in support.v2_controllers
        )
        _set(path, "memory.swap.max", limits.memory_mb and 0, "memory" in support.v2_controllers)
        _set(path, "pids.max", limits.pids, "pids" in support.v2_controllers)
        if limits.cpus and "cpu" in support.v2_controllers:
            _set(path, "cpu.max", f"{int(limits.cpus * CFS_PERIOD_US)} {CFS_PERIOD_US}", True)
        group.procs.append(str(path / "cgroup.procs"))
        return group
    for controller, base in sorted(support.v1.items()):
        if (
            (controller == "memory" and not limits.memory_mb)
            or (controller == "pids" and not limits.pids)
            or (controller == "cpu" and not limits.cpus)
        ):
            continue
        path = (base / GROUP / host if host else base / GROUP) / name
        path.mkdir(parents=True, exist_ok=True)
        group.dirs.append(path)
        if controller == "cpu" and limits.cpu_weight:
            for tree in {base / GROUP, path.parent}:  # the runtimes' tree weighs against the host's processes
                _set(tree, "cpu.shares", round(limits.cpu_weight * V1_SHARES_PER_WEIGHT), True)
        if controller == "memory":
            assert limits.memory_mb  # an unset limit skipped its controller above
            _set(path, "memory.limit_in_bytes", limits.memory_mb * 1024 * 1024, True)
            _set(
                path,
                "memory.memsw.limit_in_bytes",
                limits.memory_mb * 1024 * 1024,
                (path / "memory.memsw.limit_in_bytes").exists(),
            )
        elif controller == "pids":
            _set(path, "pids.max", limits.pids, True)
        else:
            assert limits.cpus  # an unset limit skipped its controller above
            _set(path, "cpu.cfs_period_us", CFS_PERIOD_US, True)
            _set(path, "cpu.cfs_quota_us", int(limits.cpus * CFS_PERIOD_US), True)
        group.procs.append(str(path / "cgroup.procs"))
    return group


def sweep(support: CgroupSupport, host: str, wait: float = 5.0) -> list[str]:
    """At a provider host's start: end what an earlier life of it left running in its runtimes' groups (their
    sessions were reported stopped) and remove the groups. Returns the runtimes' group names swept."""
    swept: set[str] = set()
    for hosts_group in _hosts_groups(support, host) if host else []:
        try:
            groups = [p for p in hosts_group.iterdir() if p.is_dir()]
        except OSError:
            continue
        for path in groups:
            _kill_all(path, wait)
            SessionCgroup(dirs=[path]).remove(wait)
            swept.add(path.name)
    return sorted(swept)


def _kill_all(path: Path, wait: float) -> None:
    """SIGKILL every process of the group until none is left (a process may fork while it is being killed)."""
    kill = path / "cgroup.kill"  # cgroup v2 (Linux 5.14): the kernel kills the whole group at once
    if kill.exists():
        with contextlib.suppress(OSError):
            kill.write_text("1")
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            pids = [int(pid) for pid in (path / "cgroup.procs").read_text().split()]
        except OSError:
            return
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)


def _set(path: Path, name: str, value: object, wanted: bool) -> None:
    if wanted and value is not None:
        (path / name).write_text(str(value))


def rlimits(support: CgroupSupport, limits: Limits) -> list[tuple[str, int, int]]:
    """What ``setrlimit`` adds where no cgroup limits processes: RLIMIT_NPROC counts every process of the
    tenant's uid (all of its sessions on this machine). Memory has no safe rlimit for these runtimes
    (RLIMIT_AS breaks engines that reserve large address ranges), so it is limited by cgroups only."""
    if limits.pids and "pids" not in support.covers():
        return [("RLIMIT_NPROC", limits.pids, limits.pids)]
    return []
