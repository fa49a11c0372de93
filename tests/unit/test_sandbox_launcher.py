"""The sandbox launcher's pure part: the command line and environment of a sandboxed runtime, and the limits."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from treadle.sandbox import cgroups
from treadle.sandbox.identity import TenantIds
from treadle.sandbox.launcher import (
    Forward,
    Limits,
    Mount,
    SandboxConfigError,
    SandboxSpec,
    build,
    passwd_files,
    sandbox_env,
    system_mounts,
)

IDS = TenantIds(200_007, 200_007)
WS = Path("/state/workspaces/acme/threads/thr_1")
HOME = Path("/state/provider-runtimes/host-1/codex-homes/acme")


def _spec(**kw) -> SandboxSpec:
    base = dict(
        ids=IDS,
        workspace=WS,
        env={"PATH": "/usr/bin", "HOME": str(HOME)},
        homes=(HOME,),
        binaries=(Path("/opt/codex/vendor/x86_64"),),
        system=(Mount("ro", "/usr", "/usr"), Mount("symlink", "usr/lib", "/lib")),
        etc={"/etc/passwd": Path("/state/etc/passwd")},
        forward=Forward(
            python="/usr/bin/python3",
            script="/opt/treadle/forward.py",
            socket="/run/e/k/s",
            ports=((8123, "127.0.0.1", 8123),),
            proxy_port=3128,
        ),
    )
    base.update(kw)
    return SandboxSpec(**base)


def _pairs(argv: list[str], flag: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == flag]


def test_the_command_drops_to_the_tenant_uid_before_bwrap_builds_a_private_root():
    launch = build(_spec(), ["/opt/codex/vendor/x86_64/bin/codex", "app-server"])
    argv = launch.argv
    assert argv[:6] == ["setpriv", "--reuid", "200007", "--regid", "200007", "--clear-groups"]
    bwrap = argv.index("bwrap")
    assert argv.index("--bounding-set=-all") < bwrap
    for flag in ("--unshare-all", "--die-with-parent", "--new-session", "--cap-drop"):
        assert flag in argv[bwrap:]
    assert "--share-net" not in argv  # its own network namespace: loopback only
    assert argv[argv.index("--proc") + 1] == "/proc"  # a procfs of its own pid namespace
    assert _pairs(argv, "--bind")[-1] == (str(WS), str(WS))
    assert argv[argv.index("--chdir") + 1] == str(WS)
    assert (str(HOME), str(HOME)) in _pairs(argv, "--bind")
    assert ("/opt/codex/vendor/x86_64", "/opt/codex/vendor/x86_64") in _pairs(argv, "--ro-bind")
    assert ("usr/lib", "/lib") in _pairs(argv, "--symlink")
    assert ("/state/etc/passwd", "/etc/passwd") in _pairs(argv, "--ro-bind")
    assert ("/run/e/k", "/run/e/k") in _pairs(argv, "--bind")  # the egress socket's dir
    # the forwarder starts first and runs the runtime as its child
    tail = argv[argv.index("--") + 1 :]
    assert tail[:2] == ["/usr/bin/python3", "-I"] and "--port" in tail and "8123=127.0.0.1:8123" in tail
    assert tail[tail.index("--") + 1 :] == ["/opt/codex/vendor/x86_64/bin/codex", "app-server"]
    # nothing of the host beyond what the spec names: no /root, no state dir, no /etc as a whole
    sources = {s for flag in ("--bind", "--ro-bind") for s, _ in _pairs(argv, flag)}
    assert not any(s in ("/", "/root", "/etc", "/state", "/state/workspaces", "/home") for s in sources)
    # secrets never go on the command line (the host's ps would show them)
    assert "--setenv" not in argv and launch.env == {"PATH": "/usr/bin", "HOME": str(HOME)}


def test_staged_sources_are_bound_from_the_stage_not_from_the_host_path():
    launch = build(_spec(stage="/run/treadle-sandbox"), ["/bin/true"])
    staged = {host: stage for host, stage, _ in launch.staged}
    assert set(staged) == {
        str(WS),
        str(HOME),
        "/opt/codex/vendor/x86_64",
        "/state/etc/passwd",
        "/opt/treadle/forward.py",
        "/run/e/k",
    }
    binds = _pairs(launch.argv, "--bind") + _pairs(launch.argv, "--ro-bind")
    assert (staged[str(WS)], str(WS)) in binds
    assert all(src.startswith("/run/treadle-sandbox/") or src.startswith("/usr") for src, _ in binds)
    assert [d for _, _, d in launch.staged if not d] != []  # files are staged as files


def test_a_sandbox_never_runs_as_root_nor_gets_treadle_settings():
    with pytest.raises(SandboxConfigError):
        build(_spec(ids=TenantIds(0, 0)), ["/bin/true"])
    with pytest.raises(SandboxConfigError):
        build(_spec(env={"TREADLE_NATS_URL": "nats://u:p@h"}), ["/bin/true"])
    with pytest.raises(SandboxConfigError):
        build(_spec(workspace=Path("relative/ws")), ["/bin/true"])


def test_the_environment_is_an_allow_list_plus_the_runtimes_own():
    host = {
        "TREADLE_NATS_URL": "nats://treadle:secret@127.0.0.1",
        "AWS_SECRET_ACCESS_KEY": "x",
        "LANG": "de_DE.UTF-8",
        "OPENAI_API_KEY": "sk-host",
        "PATH": "/root/.pyenv/shims:/usr/bin",
        "SSH_AUTH_SOCK": "/tmp/agent",
    }
    env = sandbox_env("/h", {"CODEX_HOME": "/c", "MOCK_KEY": "k"}, host)
    assert env["LANG"] == "de_DE.UTF-8" and env["CODEX_HOME"] == "/c" and env["MOCK_KEY"] == "k"
    assert env["PATH"] == "/usr/local/bin:/usr/bin:/bin" and env["HOME"] == "/h"
    for name in ("TREADLE_NATS_URL", "AWS_SECRET_ACCESS_KEY", "OPENAI_API_KEY", "SSH_AUTH_SOCK"):
        assert name not in env
    with pytest.raises(SandboxConfigError):
        sandbox_env("/h", {"TREADLE_CODEX_API_KEY": "x"}, {})


def test_the_synthetic_passwd_knows_only_the_tenant():
    files = passwd_files(IDS, "/h")
    assert "200007:200007" in files["/etc/passwd"] and files["/etc/passwd"].count("\n") == 3
    assert "127.0.0.1 localhost" in files["/etc/hosts"]


def test_cgroup_v1_groups_get_the_limits(tmp_path):
    support = cgroups.CgroupSupport(
        v1={"memory": tmp_path / "memory", "pids": tmp_path / "pids", "cpu": tmp_path / "cpu"}
    )
    group = cgroups.create(support, "ps_1-1", Limits(memory_mb=512, pids=64, cpus=0.5))
    assert (tmp_path / "memory/treadle-sandbox/ps_1-1/memory.limit_in_bytes").read_text() == str(512 << 20)
    assert (tmp_path / "pids/treadle-sandbox/ps_1-1/pids.max").read_text() == "64"
    assert (tmp_path / "cpu/treadle-sandbox/ps_1-1/cpu.cfs_quota_us").read_text() == "50000"
    assert sorted(group.procs) == sorted(
        str(tmp_path / c / "treadle-sandbox/ps_1-1/cgroup.procs") for c in ("memory", "pids", "cpu")
    )
    assert cgroups.rlimits(support, Limits(pids=64)) == []
    assert cgroups.rlimits(cgroups.CgroupSupport(), Limits(pids=64)) == [("RLIMIT_NPROC", 64, 64)]
    with pytest.raises(ValueError):
        cgroups.create(support, "../escape", Limits())


def test_cgroup_v2_group_gets_the_limits(tmp_path):
    support = cgroups.CgroupSupport(v2=tmp_path, v2_controllers=frozenset({"memory", "pids", "cpu"}))
    group = cgroups.create(support, "s", Limits(memory_mb=256, pids=32, cpus=1.5))
    path = tmp_path / "treadle-sandbox" / "s"
    assert (path / "memory.max").read_text() == str(256 << 20)
    assert (path / "pids.max").read_text() == "32"
    assert (path / "cpu.max").read_text() == "150000 100000"
    assert group.procs == [str(path / "cgroup.procs")]


def test_issue38_the_runtimes_tree_weighs_more_than_one_process_under_cgroup_v1(tmp_path):
    """Every runtime is in treadle-sandbox/<host>/<runtime>, and a group weighs as one process: at the
    default all runtimes together had the CPU share of one Treadle worker while a turn waited on them."""
    support = cgroups.CgroupSupport(v1={"cpu": tmp_path / "cpu"})
    cgroups.create(support, "ps_1-1", Limits(cpus=1.0, cpu_weight=1000), host="h1")
    tree = tmp_path / "cpu/treadle-sandbox"
    assert (tree / "cpu.shares").read_text() == (tree / "h1/cpu.shares").read_text() == "10240"
    assert not (tree / "h1/ps_1-1/cpu.shares").exists()  # runtimes share their tree alike
    cgroups.create(cgroups.CgroupSupport(v1={"cpu": tmp_path / "off"}), "ps_2-1", Limits(cpus=1.0, cpu_weight=None))
    assert not (tmp_path / "off/treadle-sandbox/cpu.shares").exists()


def test_issue38_the_runtimes_tree_weighs_more_than_one_process_under_cgroup_v2(tmp_path):
    support = cgroups.CgroupSupport(v2=tmp_path, v2_controllers=frozenset({"memory", "cpu"}))
    cgroups.create(support, "s", Limits(cpu_weight=1000), host="h1")
    tree = tmp_path / "treadle-sandbox"
    assert (tree / "cpu.weight").read_text() == (tree / "h1/cpu.weight").read_text() == "1000"
    assert not (tree / "h1/s/cpu.weight").exists()
    cgroups.create(cgroups.CgroupSupport(v2=tmp_path / "m", v2_controllers=frozenset({"memory"})), "s", Limits())
    assert not (tmp_path / "m/treadle-sandbox/cpu.weight").exists()  # no cpu controller: nothing to weigh


def test_reowning_a_workspace_never_follows_its_links(tmp_path):
    from treadle.sandbox.host import _chown_tree

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "host.txt").write_text("host")
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "sub" / "mine.txt").write_text("tenant")
    (ws / "link").symlink_to(outside)
    (ws / "sub" / "file-link").symlink_to(outside / "host.txt")
    _chown_tree(ws, TenantIds(200_123, 200_123))
    assert (ws / "sub" / "mine.txt").stat().st_uid == 200_123 and ws.stat().st_mode & 0o777 == 0o700
    assert (ws / "link").lstat().st_uid == 200_123  # the link itself, not what it points at
    assert (outside / "host.txt").stat().st_uid == 0 and outside.stat().st_uid == 0


def test_the_default_cpu_limit_leaves_the_host_cpus_of_its_own(monkeypatch):
    """Issue 36, finding 6d: the default was 2.0 cores, the whole of a 2-core host."""
    from treadle.sandbox.host import SandboxSettings

    monkeypatch.delenv("TREADLE_SANDBOX_CPUS", raising=False)
    for cpus, limit in ((1, 0.5), (2, 1.0), (3, 1.5), (16, 8.0)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda _, n=cpus: set(range(n)))
        assert SandboxSettings().cpus == limit
    monkeypatch.setenv("TREADLE_SANDBOX_CPUS", "3")
    assert SandboxSettings().cpus == 3.0  # the operator's choice stands


def test_masked_system_files_are_bound_over_with_dev_null_after_the_system(tmp_path):
    program = tmp_path / "usr" / "bin" / "lsb_release"
    program.parent.mkdir(parents=True)
    program.write_text("#!/bin/sh\n")
    (tmp_path / "link").symlink_to(program)
    mounts = system_mounts(
        [str(tmp_path / "usr")], masked=[str(program), str(tmp_path / "link"), str(tmp_path / "missing")]
    )
    assert mounts == (
        Mount("ro", str(tmp_path / "usr"), str(tmp_path / "usr")),
        Mount("mask", os.devnull, str(program)),
    )
    argv = build(_spec(system=mounts), ["/bin/true"]).argv
    usr, mask = argv.index(str(tmp_path / "usr")), argv.index(str(program))
    assert usr < mask and argv[mask - 2 : mask + 1] == ["--ro-bind", os.devnull, str(program)]


@pytest.mark.parametrize("encoding", ["marshal", "json"])
def test_enter_runs_a_launch_file_as_written_now_and_by_a_host_started_before_marshal(tmp_path, encoding):
    """A host process that started before an upgrade still writes JSON launch files for the new enter.py."""
    import json
    import marshal
    import subprocess
    import sys

    from treadle.sandbox.host import ENTER_SCRIPT

    payload = {"argv": ["/bin/sh", "-c", 'echo "$GREETING $1"', "sh"], "env": {"GREETING": "hello"}}
    launch = tmp_path / "launch"
    launch.write_bytes(marshal.dumps(payload) if encoding == "marshal" else json.dumps(payload).encode())
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(ENTER_SCRIPT), str(launch), "tenant"], capture_output=True, env={}, timeout=30
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, b"hello tenant\n", b"")
