"""The provider host's side of the sandbox: settings, the start-up probe, and preparing one runtime's
sandbox (ownership of its dirs, limits, the egress proxy, the launch file ``enter.py`` reads).

``Sandbox.prepare`` returns a ``Prepared``: ``command`` (what to spawn instead of the runtime's argv, with
no environment of its own: ``enter.py`` sets the sandbox's), ``wrapper`` (the same as an executable script,
for runtimes whose SDK spawns them itself) and ``close()`` (after the runtime exited: egress and cgroups).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import marshal
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from . import attach, cgroups
from .identity import TenantIdentities, TenantIds
from .launcher import Forward, Limits, SandboxSpec, build, passwd_files, sandbox_env, system_mounts

if TYPE_CHECKING:
    from .egress import Egress  # imported when a runtime needs one

log = logging.getLogger(__name__)

ENTER_SCRIPT = Path(__file__).with_name("enter.py")
ATTACH_SCRIPT = Path(__file__).with_name("attach.py")
PROXY_PORT = 3128  # the forwarder's CONNECT proxy inside every sandbox (HTTPS_PROXY)
PROBE_UID = 65534  # the probe switches to nobody: any unprivileged uid shows the same
EGRESS_ROOT = Path("/run/treadle-egress")  # short paths: a Unix socket's path has at most 107 bytes
STAGE = Path("/run/treadle-sandbox")  # an empty dir; each runtime mounts its own tmpfs on it (enter.py)


def default_cpus() -> float:
    """Half the CPUs this process may run on, at least 0.5 (the default CPU limit of one runtime)."""
    try:
        available = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        available = os.cpu_count() or 1
    return max(0.5, available / 2)


class SandboxSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TREADLE_SANDBOX_", extra="ignore", populate_by_name=True)

    mode: Literal["on", "off"] = Field(default="on", validation_alias=AliasChoices("TREADLE_SANDBOX", "mode"))
    memory_mb: int | None = 4096  # per runtime; 0 or unset in env "0": no limit
    pids: int | None = 512
    # Half the CPUs this process may run on, at least 0.5: one runtime can never take the whole host (2.0 was
    # every core of a 2-core host, and a busy runtime starved the host and the other tenants)
    cpus: float | None = Field(default_factory=default_cpus)
    tmp_mb: int | None = 1024
    cpu_weight: int | None = Field(default=1000, ge=0, le=10_000)
    bwrap: str = "bwrap"
    setpriv: str = "setpriv"

    def limits(self) -> Limits:
        return Limits(
            memory_mb=self.memory_mb or None,
            pids=self.pids or None,
            cpus=self.cpus or None,
            tmp_mb=self.tmp_mb or None,
            cpu_weight=self.cpu_weight or None,
        )


class SandboxUnavailable(Exception):
    """The host cannot sandbox a runtime and ``TREADLE_SANDBOX=off`` was not set: it starts no session."""


@dataclass(frozen=True, slots=True)
class ProbeResult:
    missing: tuple[str, ...]
    cgroups: cgroups.CgroupSupport
    bwrap: str | None
    setpriv: str | None

    @property
    def ok(self) -> bool:
        return not self.missing


def probe(settings: SandboxSettings, scratch: Path) -> ProbeResult:
    """Can this machine build the sandbox? Runs a real one (a few ms) the way every runtime starts: enter.py
    stages a dir in a private mount namespace, setpriv drops to an unprivileged uid, bwrap builds the root
    with every namespace, the system read-only, a private /proc and no network."""
    missing: list[str] = []
    bwrap, setpriv = shutil.which(settings.bwrap), shutil.which(settings.setpriv)
    if bwrap is None:
        missing.append(f"bubblewrap ({settings.bwrap} not found; apt-get install bubblewrap)")
    if setpriv is None:
        missing.append(f"setpriv ({settings.setpriv} not found; util-linux)")
    if os.geteuid() != 0:
        missing.append("root (the host switches every runtime to its tenant's uid: it must run as root)")
    if not missing:
        try:
            STAGE.mkdir(mode=0o755, parents=True, exist_ok=True)
            scratch.mkdir(parents=True, exist_ok=True)
            os.chmod(scratch, 0o700)
            workspace = scratch / "probe"
            workspace.mkdir(exist_ok=True)
            os.chown(workspace, PROBE_UID, PROBE_UID)
        except OSError as exc:
            missing.append(f"a stage dir {STAGE} and a scratch dir {scratch}: {exc}")
    if not missing:
        assert bwrap is not None and setpriv is not None  # else missing says so
        spec = SandboxSpec(
            ids=TenantIds(PROBE_UID, PROBE_UID),
            workspace=workspace,
            env={"PATH": "/usr/bin:/bin"},
            system=system_mounts(),
            setpriv=setpriv,
            bwrap=bwrap,
            limits=Limits(tmp_mb=None),
            stage=str(STAGE),
        )
        launch = build(spec, ["/bin/sh", "-c", "id -u; ls /proc | grep -c '^[0-9]' ; cat /proc/net/dev | grep -c :"])
        launch_file = scratch / "probe.launch"
        Sandbox._write_launch(
            launch_file,
            scratch / "probe.sh",
            {"stage": str(STAGE), "staged": launch.staged, "argv": launch.argv, "env": launch.env},
        )
        command = [sys.executable, "-I", "-S", str(ENTER_SCRIPT), str(launch_file)]
        try:
            done = subprocess.run(command, env={}, cwd=workspace, capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired) as exc:
            done = subprocess.CompletedProcess(command, 1, "", str(exc))
        lines = done.stdout.split()
        if done.returncode != 0:
            missing.append(
                f"a working bubblewrap sandbox as an unprivileged uid (user namespaces?): "
                f"{done.stderr.strip()[:300] or done.returncode}"
            )
        elif lines[:1] != [str(PROBE_UID)]:
            missing.append(f"switching to an unprivileged uid (the sandbox ran as uid {lines[:1]})")
        elif len(lines) >= 3 and lines[2] != "1":
            missing.append("a private network namespace (the sandbox saw more than loopback)")
    return ProbeResult(tuple(missing), cgroups.detect(), bwrap, setpriv)


def _chown_tree(path: Path, ids: TenantIds) -> None:
    """Make ``path`` and everything under it the tenant's (lchown: links are never followed)."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise SandboxUnavailable(f"{path} is a symbolic link, not a directory")
    if (st.st_uid, st.st_gid) != (ids.uid, ids.gid):
        os.lchown(path, ids.uid, ids.gid)
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)
    # fwalk: every entry is changed relative to its directory's fd, never through a path a running agent
    # could swap for a link between the listing and the chown
    for _, dirs, files, dir_fd in os.fwalk(path, follow_symlinks=False):
        for name in dirs + files:
            with contextlib.suppress(FileNotFoundError):
                if os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_uid != ids.uid:
                    os.chown(name, ids.uid, ids.gid, dir_fd=dir_fd, follow_symlinks=False)


def socket_dir(path: Path, uid: int, gid: int) -> None:
    """A runtime's egress dir in its host's. The host's dir goes with the last runtime that stops in it
    (``Prepared.close``), maybe between the two mkdirs here: it is then made again."""
    while True:
        with contextlib.suppress(FileExistsError):  # (Path.mkdir's exist_ok raises if it is gone by its check)
            os.mkdir(path.parent, 0o711)
        try:
            os.mkdir(path)
        except FileExistsError:
            pass
        except FileNotFoundError:
            continue
        break
    os.chown(path, uid, gid)
    os.chmod(path, 0o700)


@dataclass
class Prepared:
    command: list[str]
    wrapper: Path
    launch_file: Path
    ids: TenantIds
    env: dict[str, str]
    _cgroup: cgroups.SessionCgroup | None = None
    _egress: Egress | None = None
    _closed: bool = False

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._egress is not None:
            with contextlib.suppress(Exception):
                await self._egress.close()
            for path in (self._egress.socket_path.parent, self._egress.socket_path.parent.parent):
                with contextlib.suppress(OSError):
                    path.rmdir()  # this runtime's dir, then the host's once no runtime of it is left
        if self._cgroup is not None:
            await asyncio.to_thread(self._cgroup.remove)
        with contextlib.suppress(OSError):
            self.launch_file.unlink()


@dataclass
class Sandbox:
    """One per provider host. ``runtime_dir`` holds the launch files and synthetic /etc files (host-only);
    egress sockets live under ``EGRESS_ROOT`` (short paths), staged mounts under ``STAGE``."""

    settings: SandboxSettings
    identities: TenantIdentities
    runtime_dir: Path
    result: ProbeResult | None = None
    _etc_written: set[Any] = field(default_factory=set)
    homes: dict[str, set[Path]] = field(default_factory=dict)  # tenant -> its runtimes' homes (the disk budget's)

    @property
    def enabled(self) -> bool:
        return self.settings.mode == "on"

    def start(self) -> ProbeResult:
        self.result = probe(self.settings, self.runtime_dir / "sandbox-probe")
        if self.enabled and not self.result.ok:
            log.error(
                "sandbox unavailable, no runtime session will start (TREADLE_SANDBOX=off runs them "
                "unsandboxed): missing %s",
                "; ".join(self.result.missing),
            )
        elif self.enabled:
            log.info("sandbox: bubblewrap as tenant uids; limits by %s", self.result.cgroups.describe())
        else:
            log.warning("TREADLE_SANDBOX=off: provider runtimes run as the host's user with no isolation")
        return self.result

    @property
    def host_key(self) -> str:
        """Names this host's own egress dir and cgroup (its runtime dir: one per provider host on a machine)."""
        return hashlib.sha256(str(self.runtime_dir).encode()).hexdigest()[:16]

    @property
    def egress_root(self) -> Path:
        """This host's egress sockets: one dir per host (its runtime dir), one per runtime below it."""
        return EGRESS_ROOT / self.host_key

    def host_start(self, workspaces: Path) -> ProbeResult:
        """At the provider host's start: probe (and log what the sandbox will be), and remove what an earlier
        life of this host left behind (a killed host closes nothing): its egress sockets, and its runtimes'
        cgroups with whatever still runs in them."""
        shutil.rmtree(self.egress_root, ignore_errors=True)
        result = self.start()
        swept = cgroups.sweep(result.cgroups, self.host_key)
        if swept:
            log.warning("swept the cgroups of %d runtimes an earlier life of this host left: %s", len(swept), swept)
        return result

    def check(self) -> None:
        if not self.enabled:
            return
        if self.result is None:
            self.start()
        assert self.result is not None
        if not self.result.ok:
            raise SandboxUnavailable(
                "the provider host cannot sandbox runtimes (set TREADLE_SANDBOX=off to run "
                f"them unsandboxed): missing {'; '.join(self.result.missing)}"
            )

    async def prepare(
        self,
        *,
        tenant: str,
        name: str,
        workspace: Path,
        homes: Sequence[Path],
        binaries: Sequence[Path],
        argv: Sequence[str],
        runtime_env: Mapping[str, str],
        model_urls: Sequence[str],
        home: Path,
        inherit: Sequence[str] = (),
        orchestrator_url: str | None = None,
    ) -> Prepared:
        """``orchestrator_url``: the MCP server of a runtime given a session credential, its one other egress
        target (that host and port only)."""
        self.check()
        assert self.result is not None
        ids = await asyncio.to_thread(self.identities.ids, tenant)
        self.homes.setdefault(tenant, set()).update(Path(h) for h in homes)
        files = self.runtime_dir / "sandbox"
        await asyncio.to_thread(self._own, ids, workspace, homes, files)
        etc = await asyncio.to_thread(self._etc, tenant, ids, home)
        env = dict(runtime_env)
        urls = [*model_urls, *([orchestrator_url] if orchestrator_url else [])]
        forward, egress = await self._egress(name, ids, urls, env, orchestrator_url)
        spec = SandboxSpec(
            ids=ids,
            workspace=workspace,
            env=sandbox_env(home, env),
            homes=tuple(homes),
            binaries=tuple(binaries),
            etc=etc,
            system=system_mounts(),
            forward=forward,
            limits=self.settings.limits(),
            setpriv=self.result.setpriv or "setpriv",
            bwrap=self.result.bwrap or "bwrap",
            stage=str(STAGE),
        )
        launch = build(spec, list(argv))
        try:
            group = await asyncio.to_thread(cgroups.create, self.result.cgroups, name, spec.limits, self.host_key)
        except OSError as exc:
            log.warning("no cgroup for %s (%r): RLIMIT_NPROC only", name, exc)
            group = cgroups.SessionCgroup()
        launch_file = files / f"{name}.launch"
        wrapper = files / f"{name}.sh"
        payload = {
            "stage": str(STAGE),
            "staged": launch.staged,
            "argv": launch.argv,
            "env": launch.env,
            "cgroups": group.procs,
            "inherit": list(inherit),
            "rlimits": cgroups.rlimits(self.result.cgroups if group.procs else cgroups.CgroupSupport(), spec.limits),
        }
        await asyncio.to_thread(self._write_launch, launch_file, wrapper, payload)
        command = [sys.executable, "-I", "-S", str(ENTER_SCRIPT), str(launch_file)]
        return Prepared(
            command=command,
            wrapper=wrapper,
            launch_file=launch_file,
            ids=ids,
            env=launch.env,
            _cgroup=group,
            _egress=egress,
        )

    async def attach(self, prepared: Prepared, pid: int, workspace: Path) -> None:
        """Bind ``workspace`` into the running sandbox of ``prepared`` (bwrap running as ``pid``), at its own path
        (attach.py): a spare runtime launched with a placeholder takes its thread's workspace. Made the tenant's
        and checked for links first, as at a launch; SandboxUnavailable when it cannot be bound."""
        ids = prepared.ids
        source = str(workspace)
        if not workspace.is_absolute() or os.path.normpath(source) != source:
            raise SandboxUnavailable(f"workspace {source!r} is not a plain absolute path")

        def bind() -> None:
            self._own(ids, workspace, (), self.runtime_dir / "sandbox")
            attach.bind(pid, source, ids.uid, ids.gid)

        try:
            await asyncio.to_thread(bind)
        except OSError as exc:
            raise SandboxUnavailable(f"workspace {workspace} not bound into the sandbox: {exc}") from exc

    def _own(self, ids: TenantIds, workspace: Path, homes: Sequence[Path], files: Path) -> None:
        files.mkdir(parents=True, exist_ok=True)
        os.chmod(files, 0o700)
        for path in (*homes, workspace):
            path.mkdir(parents=True, exist_ok=True)
            _chown_tree(path, ids)
        for path in (*homes, workspace):
            if os.path.realpath(path) != os.path.normpath(os.path.abspath(path)):
                raise SandboxUnavailable(f"{path} is reached through a symbolic link: not bound into a sandbox")

    def _etc(self, tenant: str, ids: TenantIds, home: Path) -> dict[str, Path]:
        root = self.runtime_dir / "sandbox-etc" / tenant / str(home).strip("/").replace("/", "_")
        out = {}
        root.mkdir(parents=True, exist_ok=True)
        for dest, text in passwd_files(ids, home).items():
            path = root / Path(dest).name
            if not path.exists() or path.read_text() != text:
                path.write_text(text)
                os.chmod(path, 0o644)
            out[dest] = path
        return out

    async def _egress(
        self, name: str, ids: TenantIds, urls: Sequence[str], env: dict[str, str], orchestrator_url: str | None
    ) -> tuple[Forward | None, Egress | None]:
        if not urls:
            return None, None
        from .egress import FORWARD_SCRIPT, Egress, mcp_paths, routes, sandbox_python

        route = routes(urls)
        socket_dir = self.egress_root / hashlib.sha256(name.encode()).hexdigest()[:16]
        await asyncio.to_thread(self._socket_dir, socket_dir, ids)
        socket = socket_dir / "s"
        egress = Egress(socket, route.allowed, paths=mcp_paths(orchestrator_url, urls))
        await egress.start()
        if route.proxied:  # some URL is not on the loopback: the runtime reaches it through the proxy
            proxy = f"http://127.0.0.1:{PROXY_PORT}"
            env.update(
                {
                    "HTTPS_PROXY": proxy,
                    "https_proxy": proxy,
                    "HTTP_PROXY": proxy,
                    "http_proxy": proxy,
                    "ALL_PROXY": proxy,
                    "all_proxy": proxy,
                }
            )
        env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost,::1"
        forward = Forward(
            python=sandbox_python(),
            script=str(FORWARD_SCRIPT),
            socket=str(socket),
            ports=route.ports,
            proxy_port=PROXY_PORT,
        )
        return forward, egress

    def _socket_dir(self, path: Path, ids: TenantIds) -> None:
        EGRESS_ROOT.mkdir(mode=0o711, exist_ok=True)
        socket_dir(path, ids.uid, ids.gid)

    @staticmethod
    def _write_launch(launch_file: Path, wrapper: Path, payload: dict[str, Any]) -> None:
        # marshal, not JSON: enter.py reads it with a built-in module (no imports on every runtime's start)
        fd = os.open(launch_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            marshal.dump(payload, f)
        script = f'#!/bin/sh\nexec {sys.executable} -I -S {ENTER_SCRIPT} {launch_file} "$@"\n'
        fd = os.open(wrapper, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o700)
        with os.fdopen(fd, "w") as f:
            f.write(script)
