"""Issue 23, item 1, as far as this machine allows: no container engine runs here (the docker client has no
daemon; no image registry is reachable), so the image's entrypoint (deploy/entrypoint.sh) runs as the image's
uid/gid 10001 with the documented environment (deploy/compose.yaml's, on loopback) on fresh volume
directories owned by root, as Kubernetes mounts them with fsGroup 10001 (root-owned, group 10001, setgid).
broker-init writes auth.conf there, a nats-server 2.15 runs deploy/nats/nats-server.conf on it (one node:
the cluster block is cut), and every worker comes up and answers /readyz, then stops on SIGTERM with 0."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.support.helpers import wait_for
from treadle.ops.servers import NatsServer, RedisServer, free_port

ROOT = Path(__file__).resolve().parents[2]
ENTRYPOINT = ROOT / "deploy" / "entrypoint.sh"
UID = GID = 10001  # deploy/Dockerfile's USER
WORKERS = ("coordinator", "supervisor", "projector", "provider-host", "checkpoints")
SETTINGS_PREFIX = {"provider-host": "PROVIDER_HOST", "checkpoints": "CHECKPOINTS"}


def _as_image_user(*argv: str) -> list[str]:
    # fsGroup: the pod's processes carry the volume's group as a supplementary group
    return ["setpriv", f"--reuid={UID}", f"--regid={GID}", f"--groups={GID}", *argv]


def _fresh_volume(path: Path, fs_group: int | None) -> Path:
    path.mkdir(mode=0o755)
    os.chown(path, 0, 0)
    if fs_group is not None:  # what the kubelet does to a volume of a pod with securityContext.fsGroup
        os.chown(path, 0, fs_group)
        os.chmod(path, 0o2775)
    return path


def _single_node_config() -> str:
    """deploy/nats/nats-server.conf as shipped, minus the cluster block (one node here); ports and the store
    come from NatsServer's command line. It includes auth/auth.conf beside it, as in the NATS containers."""
    text = (ROOT / "deploy" / "nats" / "nats-server.conf").read_text()
    text = re.sub(r"\ncluster \{.*?\n\}\n", "\n", text, flags=re.S)
    text = text.replace("$NATS_SERVER_NAME", "treadle-nats-1")
    text = re.sub(r"^(listen|http): .*$", "", text, flags=re.M)
    text = re.sub(r"store_dir: .*", "", text)
    return text


def _image_venv(base: Path) -> Path:
    """The image's /opt/treadle: a venv of a system CPython 3.11 the image's uid can run (the project venv's
    interpreter may sit under root's 0700 home) that sees the project venv's locked packages and Treadle."""
    venv = base / "opt-treadle"
    subprocess.run(["/usr/bin/python3.11", "-m", "venv", "--without-pip", str(venv)], check=True)
    site = venv / "lib" / "python3.11" / "site-packages"
    (site / "treadle-locked.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    script = venv / "bin" / "treadle"
    script.write_text(f"#!{venv}/bin/python\nimport sys\nfrom treadle.cli.main import main\nsys.exit(main())\n")
    script.chmod(0o755)
    return venv


@pytest.fixture
def root() -> Iterator[Path]:
    # pytest's tmp_path sits under a 0700 dir of root's: the image's uid could not reach its volumes there
    assert sys.version_info[:2] == (3, 11) and Path("/usr/bin/python3.11").is_file()
    base = Path(tempfile.mkdtemp(prefix="treadle-image-"))
    os.chmod(base, 0o755)
    home = base / "home"
    home.mkdir()
    os.chown(home, UID, GID)  # the image's /home/treadle (useradd --create-home)
    _image_venv(base)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


async def _run(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def _status(port: int, path: str) -> int:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return 0
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        line = await reader.readline()
        return int(line.split()[1]) if line.startswith(b"HTTP/") else 0
    except (OSError, ValueError, IndexError):
        return 0
    finally:
        writer.close()


def _documented_env(root: Path, state: Path, nats_auth: Path, **more: str) -> dict[str, str]:
    return {
        "PATH": f"{root / 'opt-treadle' / 'bin'}:/usr/bin:/bin",  # the image's /opt/treadle/bin first
        "HOME": str(root / "home"),
        "TREADLE_STATE_DIR": str(state),
        "TREADLE_NATS_AUTH_DIR": str(nats_auth),
        "TREADLE_LOG_FORMAT": "json",
        "TREADLE_NATS_USER": "treadle",
        "TREADLE_NATS_PASSWORD": "s3cret-for-the-image-test",
        "TREADLE_STREAM_REPLICAS": "1",
        **more,
    }


@contextlib.asynccontextmanager
async def _workers(env: dict[str, str], ports: dict[str, int]) -> AsyncIterator[dict[str, asyncio.subprocess.Process]]:
    procs: dict[str, asyncio.subprocess.Process] = {}
    try:
        for worker, port in ports.items():
            own = dict(env)
            if worker == "gateway":
                own |= {"TREADLE_GATEWAY_HOST": "127.0.0.1", "TREADLE_GATEWAY_PORT": str(port)}
            else:
                prefix = SETTINGS_PREFIX.get(worker, worker.upper())
                own |= {f"TREADLE_{prefix}_METRICS_HOST": "127.0.0.1", f"TREADLE_{prefix}_METRICS_PORT": str(port)}
            procs[worker] = await asyncio.create_subprocess_exec(
                *_as_image_user(str(ENTRYPOINT), worker),
                env=own,
                cwd=env["HOME"],
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
        yield procs
    finally:
        for proc in procs.values():
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_the_image_entrypoints_start_every_worker_as_uid_10001_on_fresh_root_owned_volumes(root: Path):
    state = _fresh_volume(root / "var-lib-treadle", fs_group=GID)
    nats_auth = _fresh_volume(root / "nats-auth", fs_group=GID)
    async with RedisServer(root / "redis") as redis:
        env = _documented_env(root, state, nats_auth, TREADLE_REDIS_URL=redis.url)
        code, out = await _run(_as_image_user(str(ENTRYPOINT), "broker-init"), env)
        assert code == 0, out
        assert (nats_auth / "auth.conf").stat().st_uid == UID
        (root / "nats").mkdir()
        (root / "nats" / "auth").symlink_to(nats_auth)  # compose: nats-auth:/etc/nats/auth:ro
        nats_server = NatsServer(root / "nats", config_text=_single_node_config(), auth=False)
        async with nats_server:
            env["TREADLE_NATS_URL"] = nats_server.address  # the password comes from TREADLE_NATS_PASSWORD
            ports = {worker: free_port() for worker in ("gateway", *WORKERS)}
            async with _workers(env, ports) as procs:

                async def all_ready() -> bool:
                    for worker, proc in procs.items():
                        assert proc.returncode is None, f"{worker} exited with {proc.returncode}"
                    return all([await _status(port, "/readyz") == 200 for port in ports.values()])

                await wait_for(all_ready, timeout=90, interval=0.2, what="every worker answering /readyz")
                assert await _status(ports["coordinator"], "/metrics") == 200
                assert any(p.stat().st_uid == UID for p in state.iterdir()), "nothing written to the state volume"
                for proc in procs.values():
                    proc.send_signal(signal.SIGTERM)
                codes = {worker: await asyncio.wait_for(proc.wait(), 60) for worker, proc in procs.items()}
                # uvicorn re-raises the SIGTERM it handled once its graceful shutdown is done
                assert codes == dict.fromkeys(procs, 0) | {"gateway": -signal.SIGTERM}


@pytest.mark.parametrize("worker", ["broker-init", "checkpoints", "provider-host"])
async def test_a_volume_the_image_uid_cannot_write_stops_the_worker_with_one_line_naming_it(root: Path, worker: str):
    """Hostile case: a fresh root-owned disk mounted without fsGroup. The worker stops at once (EX_CONFIG)
    naming the directory and the fix, and writes nothing."""
    state = _fresh_volume(root / "var-lib-treadle", fs_group=None)
    nats_auth = _fresh_volume(root / "nats-auth", fs_group=None)
    code, out = await _run(_as_image_user(str(ENTRYPOINT), worker), _documented_env(root, state, nats_auth))
    assert code == 78
    assert "is not writable by uid 10001" in out and "fsGroup" in out
    assert list(state.iterdir()) == [] and list(nats_auth.iterdir()) == []
