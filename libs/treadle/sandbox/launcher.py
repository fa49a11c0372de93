"""The one launcher every provider runtime starts through: a pure description (``SandboxSpec``) turned into
the command line and environment of a sandboxed process.

    setpriv --reuid U --regid G --clear-groups --inh-caps=-all --bounding-set=-all --pdeathsig SIGKILL \\
      bwrap --unshare-all --die-with-parent --new-session --cap-drop ALL --hostname sandbox \\
            --ro-bind /usr /usr --symlink usr/lib /lib … (the system, read-only) \\
            --ro-bind STAGE/0 /etc/passwd …  (a synthetic passwd/group/hosts) \\
            --proc /proc --dev /dev --size N --tmpfs /tmp \\
            --ro-bind STAGE/3 BIN … --bind STAGE/5 HOME … --bind STAGE/7 WORKSPACE \\
            --chdir WORKSPACE -- [python3 -I -S forward.py --unix SOCK … --] runtime argv…

(``STAGE/<i>``: the host paths, bind-mounted there by ``enter.py`` in a private mount namespace; see
``Launch.staged``. Without a stage the host paths are bound directly.)

``setpriv`` drops the host's root to the tenant's own uid/gid (``identity.TenantIds``) before anything of
the sandbox exists, so every file the runtime touches is checked against that uid on the host as well;
``bwrap`` (unprivileged, in a user namespace it creates) then builds a private root that shows the
system read-only, the tenant's workspace and the runtime's private homes read-write, and nothing else:
no other workspace, no state dir, no /root, no ``/proc`` of the host's processes, and its own empty
network namespace (loopback only; ``forward.py`` is its one way out, to the host's egress proxy).

The environment is not put on the command line (``--setenv`` would show model keys in the host's ``ps``):
the child is spawned with exactly ``Launch.env``, which ``setpriv`` and ``bwrap`` pass through unchanged,
so the spawner must never merge ``os.environ`` into it. ``sandbox_env`` builds it from an allow-list plus
the runtime's own variables and refuses any ``TREADLE_*`` name.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .identity import TenantIds

# What a runtime needs of the system, read-only. A path that is a symlink (merged /usr: /lib -> usr/lib)
# is recreated as the same symlink; a missing one is left out.
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Of /etc only what programs read to work (the dynamic loader's cache, TLS roots, alternatives, locale and
# time zone, shell start-up files); never the machine's passwd/shadow, ssh keys or service configuration.
ETC_PATHS = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/ca-certificates.conf",
    "/etc/pki",
    "/etc/nsswitch.conf",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/profile",
    "/etc/profile.d",
    "/etc/bash.bashrc",
    "/etc/inputrc",
    "/etc/mime.types",
    "/etc/protocols",
    "/etc/services",
    "/etc/host.conf",
    "/etc/magic",
    "/etc/debian_version",
    "/etc/os-release",
    "/etc/lsb-release",
)
# System programs a sandbox does not get (bound over with /dev/null: not executable, nothing to read).
# ``lsb_release``: Codex's app-server runs ``lsb_release -a`` twice before it answers ``initialize`` (its
# user agent's OS name), a shell script of some eight processes each, a fifth of a sandboxed launch on a
# busy host; without it Codex reads /etc/os-release, which the sandbox has, and so can a tenant's command.
MASKED_PATHS = ("/usr/bin/lsb_release",)
# Host variables a runtime may inherit (values only; never secrets): locale and time zone.
ENV_ALLOW = ("LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TZ")
FORBIDDEN_PREFIXES = ("TREADLE_",)
PATH = "/usr/local/bin:/usr/bin:/bin"


class SandboxConfigError(ValueError):
    """A spec that would open the sandbox (a secret in its environment, a relative path, …)."""


@dataclass(frozen=True, slots=True)
class Limits:
    """Per sandboxed runtime; None: no limit of that kind."""

    memory_mb: int | None = 4096
    pids: int | None = 512
    cpus: float | None = 2.0  # CPU bandwidth in cores (cgroup cpu quota)
    # The runtimes' tree against the host's own processes when the CPUs are contended (cgroup v2 units: 100 is one
    # ordinary process). Every runtime sits in a group of groups, and a group weighs as one process: unweighted,
    # all runtimes together got the share of one worker, and a turn waited on Treadle's own background work.
    cpu_weight: int | None = 1000
    tmp_mb: int | None = 1024  # size of the private /tmp (tmpfs)


@dataclass(frozen=True, slots=True)
class Mount:
    kind: str  # "ro" | "rw" | "symlink" | "mask" (source: /dev/null, bound read-only over dest)
    source: str
    dest: str


@dataclass(frozen=True, slots=True)
class Forward:
    """The sandbox's way out: ``forward.py`` run by ``python`` with the egress socket at ``socket``
    (its directory is bound into the sandbox), loopback ``ports`` (listen, host, port) and a CONNECT
    ``proxy_port``."""

    python: str
    script: str
    socket: str
    ports: tuple[tuple[int, str, int], ...] = ()
    proxy_port: int | None = None

    def argv(self) -> list[str]:
        command = [self.python, "-I", "-S", self.script, "--unix", self.socket]
        for listen, host, port in self.ports:
            command += ["--port", f"{listen}={f'[{host}]' if ':' in host else host}:{port}"]
        if self.proxy_port is not None:
            command += ["--proxy", str(self.proxy_port)]
        return [*command, "--"]


@dataclass(frozen=True, slots=True)
class SandboxSpec:
    ids: TenantIds
    workspace: Path
    env: Mapping[str, str]  # the runtime's whole environment inside (see sandbox_env)
    homes: tuple[Path, ...] = ()  # the runtime's private dirs, read-write (CODEX_HOME, HOME, …)
    binaries: tuple[Path, ...] = ()  # read-only: the runtime's own install
    etc: Mapping[str, Path] = field(default_factory=dict)  # /etc/passwd etc. -> a synthetic file on the host
    system: tuple[Mount, ...] = ()  # from system_mounts()
    forward: Forward | None = None
    limits: Limits = Limits()
    setpriv: str = "setpriv"
    bwrap: str = "bwrap"
    stage: str | None = None  # see Launch.staged; None: bind the host paths directly


@dataclass(frozen=True, slots=True)
class Launch:
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    # (host path, staged path, is_dir): what enter.py bind-mounts, as root in a private mount namespace, onto
    # a tmpfs at ``SandboxSpec.stage`` before it drops to the tenant's uid, so bwrap binds from paths every
    # uid can reach while the host paths (a 0700 state dir, /root) stay closed
    staged: list[tuple[str, str, bool]] = field(default_factory=list)


def sandbox_env(
    home: Path | str, runtime: Mapping[str, str], host: Mapping[str, str] | None = None, user: str = "tenant"
) -> dict[str, str]:
    """The environment inside: a fixed base, the allow-listed host variables, then the runtime's own."""
    host = os.environ if host is None else host
    env = {
        "PATH": PATH,
        "HOME": str(home),
        "USER": user,
        "LOGNAME": user,
        "SHELL": "/bin/bash",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
    }
    env.update({k: host[k] for k in ENV_ALLOW if k in host})
    env.update(runtime)
    check_env(env)
    return env


def check_env(env: Mapping[str, str]) -> None:
    bad = sorted(k for k in env if k.startswith(FORBIDDEN_PREFIXES))
    if bad:
        raise SandboxConfigError(f"a sandbox never gets Treadle's own settings: {', '.join(bad)}")


def system_mounts(
    paths: Iterable[str] = SYSTEM_PATHS + ETC_PATHS, masked: Iterable[str] = MASKED_PATHS
) -> tuple[Mount, ...]:
    """The read-only system view of this machine (I/O: looks at which paths exist and which are links);
    the ``masked`` files that exist come last, over what the system paths showed of them."""
    mounts = []
    for path in paths:
        if os.path.islink(path):
            mounts.append(Mount("symlink", os.readlink(path), path))
        elif os.path.exists(path):
            mounts.append(Mount("ro", path, path))
    for path in masked:
        if os.path.isfile(path) and not os.path.islink(path):  # a link would be followed to where it points
            mounts.append(Mount("mask", os.devnull, path))
    return tuple(mounts)


def _absolute(path: Path | str, what: str) -> str:
    text = os.fspath(path)
    if not os.path.isabs(text) or "\0" in text:
        raise SandboxConfigError(f"{what} must be an absolute path: {text!r}")
    return os.path.normpath(text)


class _Stager:
    def __init__(self, stage: str | None) -> None:
        self.stage = stage
        self.staged: list[tuple[str, str, bool]] = []

    def __call__(self, source: str, is_dir: bool = True) -> str:
        if self.stage is None:
            return source
        staged = f"{self.stage}/{len(self.staged)}"
        self.staged.append((source, staged, is_dir))
        return staged


def bwrap_args(spec: SandboxSpec, stager: _Stager | None = None) -> list[str]:
    stage = stager or _Stager(None)
    workspace = _absolute(spec.workspace, "workspace")
    args = [
        spec.bwrap,
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--hostname",
        "sandbox",
    ]
    for mount in spec.system:
        if mount.kind == "symlink":
            args += ["--symlink", mount.source, mount.dest]
        elif mount.kind == "mask":
            args += ["--ro-bind", os.devnull, mount.dest]
        else:
            args += ["--ro-bind" if mount.kind == "ro" else "--bind", mount.source, mount.dest]
    for dest, source in sorted(spec.etc.items()):
        args += ["--ro-bind", stage(_absolute(source, "etc file"), False), _absolute(dest, "etc path")]
    args += ["--proc", "/proc", "--dev", "/dev"]
    if spec.limits.tmp_mb:
        args += ["--size", str(spec.limits.tmp_mb * 1024 * 1024)]
    args += ["--tmpfs", "/tmp", "--dir", "/var/tmp"]
    for binary in spec.binaries:
        path = _absolute(binary, "binary")
        args += ["--ro-bind", stage(path, os.path.isdir(path)), path]
    if spec.forward is not None:
        script = _absolute(spec.forward.script, "forward script")
        socket_dir = os.path.dirname(_absolute(spec.forward.socket, "egress socket"))
        args += ["--ro-bind", stage(script, False), script, "--bind", stage(socket_dir), socket_dir]
    for home in spec.homes:
        path = _absolute(home, "home")
        args += ["--bind", stage(path), path]
    args += ["--bind", stage(workspace), workspace, "--chdir", workspace]
    return args


def build(spec: SandboxSpec, argv: Sequence[str]) -> Launch:
    """The sandboxed command for ``argv`` (pure)."""
    if not argv:
        raise SandboxConfigError("nothing to run")
    if spec.ids.uid == 0 or spec.ids.gid == 0:
        raise SandboxConfigError("a sandbox never runs as root")
    check_env(spec.env)
    prefix = [
        spec.setpriv,
        "--reuid",
        str(spec.ids.uid),
        "--regid",
        str(spec.ids.gid),
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--pdeathsig",
        "SIGKILL",
    ]
    inner = [*(spec.forward.argv() if spec.forward else []), *argv]
    stager = _Stager(spec.stage)
    sandbox = bwrap_args(spec, stager)
    return Launch(
        argv=[*prefix, *sandbox, "--", *inner], env=dict(spec.env), cwd=Path(spec.workspace), staged=stager.staged
    )


def passwd_files(ids: TenantIds, home: Path | str, user: str = "tenant") -> dict[str, str]:
    """Contents of the synthetic /etc/passwd, /etc/group and /etc/hosts a sandbox sees: its own uid only."""
    return {
        "/etc/passwd": f"root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n"
        f"{user}:x:{ids.uid}:{ids.gid}:tenant:{home}:/bin/bash\n"
        f"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
        "/etc/group": f"root:x:0:\n{user}:x:{ids.gid}:\nnogroup:x:65534:\n",
        "/etc/hosts": "127.0.0.1 localhost sandbox\n::1 localhost\n",
    }
