"""Fixtures of the sandbox attack tests: a Treadle-like state dir (workspace root with two tenants, a
provider-runtimes dir, a secret nats-url file), the host's secrets in its environment, stand-ins for the
broker and Redis on the host's loopback that record every connection, and the attack itself: one shell
script whose output must reach the model API with none of the host's bytes in it.

Test modules import these by name, so that only they get them."""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from treadle.sandbox.host import Sandbox, SandboxSettings
from treadle.sandbox.identity import TenantIdentities

REPO = Path(__file__).resolve().parents[2]

SECRET = "s3cr3t-broker-password-" + uuid.uuid4().hex[:8]  # in the host's env and its nats-url file
FOREIGN = "FOREIGN-TENANT-BYTES-" + uuid.uuid4().hex[:8]  # in the other tenant's workspace
END = "END-OF-ATTACK"


@dataclass
class Listener:
    """A host loopback service (the broker, Redis) that records whoever connects."""

    name: str
    connections: list = field(default_factory=list)
    port: int = 0

    async def start(self) -> Listener:
        async def seen(reader, writer):
            self.connections.append(writer.get_extra_info("peername"))
            writer.close()

        self._server = await asyncio.start_server(seen, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        self._server.close()
        await self._server.wait_closed()


@dataclass
class World:
    root: Path  # the state dir (not under /tmp: CODEX_HOME must not be)
    workspaces: Path
    runtime_dir: Path
    sandbox: Sandbox
    broker: Listener
    redis: Listener
    foreign_file: Path
    nats_url_file: Path

    def workspace(self, tenant: str, name: str = "w") -> Path:
        path = self.workspaces / tenant / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def attack(self, marker_dir: Path) -> str:
        """Every way out a shell command could try; each one's success would print foreign bytes or a flag."""
        host_pid = os.getpid()
        return "; ".join(
            [
                f"cat {self.foreign_file}",
                f"ls {self.foreign_file.parent}",
                f"cat {self.nats_url_file}",
                f"ls -a {self.root}",
                "ls -a /root",
                "env",
                "tr '\\0' '\\n' < /proc/1/environ",
                f"tr '\\0' '\\n' < /proc/{host_pid}/environ",
                f"cat /proc/{host_pid}/cmdline",
                "ls /proc | grep -E '^[0-9]+$' | tr '\\n' ' '",
                f"(exec 3<>/dev/tcp/127.0.0.1/{self.broker.port}) && echo BROKER-CONNECTED",
                f"(exec 3<>/dev/tcp/127.0.0.1/{self.redis.port}) && echo REDIS-CONNECTED",
                # through the sandbox's own way out: the forwarder's CONNECT proxy, to the broker and Redis
                *(
                    f"(exec 3<>/dev/tcp/127.0.0.1/3128 && printf 'CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\n\\r\\n' >&3 "
                    f"&& timeout 5 head -c 200 <&3)"
                    for port in (self.broker.port, self.redis.port)
                ),
                f"echo pwned > {marker_dir}/outside-marker",
                f"echo pwned > {self.root}/state-marker",
                "id -u",
                f"echo {END}",
            ]
        )

    def assert_clean(self, output: str, marker_dir: Path) -> None:
        assert END in output, output  # the attack ran to its end inside the sandbox
        for secret in (SECRET, FOREIGN, "TREADLE_", "BROKER-CONNECTED", "REDIS-CONNECTED", "sk-mock-host-only"):
            assert secret not in output, (secret, output)
        assert not self.broker.connections and not self.redis.connections
        assert not (marker_dir / "outside-marker").exists()
        assert not (self.root / "state-marker").exists()


@pytest.fixture(scope="module")
async def world(monkeypatch_module) -> World:
    root = REPO / ".treadle" / "test-isolation" / uuid.uuid4().hex[:10]
    root.mkdir(parents=True)
    os.chmod(root, 0o700)  # closed to every other uid: the tenant's uid never needs to pass through it
    workspaces = root / "workspaces"
    workspaces.mkdir()
    other = workspaces / "othertenant" / "w"
    other.mkdir(parents=True)
    foreign_file = other / "secret.txt"
    foreign_file.write_text(FOREIGN)
    os.chmod(workspaces / "othertenant", 0o755)  # even a world-readable foreign workspace stays invisible
    nats_url_file = root / "nats-url"
    nats_url_file.write_text(f"nats://treadle:{SECRET}@127.0.0.1:4222")
    os.chmod(nats_url_file, 0o644)  # even a world-readable one
    runtime_dir = root / "provider-runtimes" / "host-1"
    runtime_dir.mkdir(parents=True)
    monkeypatch_module.setenv("TREADLE_NATS_URL", f"nats://treadle:{SECRET}@127.0.0.1:4222")
    monkeypatch_module.setenv("TREADLE_NATS_PASSWORD", SECRET)
    monkeypatch_module.setenv("OPENAI_API_KEY", "sk-mock-host-only")
    sandbox = Sandbox(SandboxSettings(mode="on"), TenantIdentities(workspaces), runtime_dir)
    if not sandbox.start().ok:  # e.g. not root, or no bubblewrap: the provider host would refuse too
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(
            f"this machine cannot build the sandbox (make setup installs bubblewrap; the tests run as root): {'; '.join(sandbox.result.missing)}"
        )
    broker, redis = await Listener("broker").start(), await Listener("redis").start()
    yield World(root, workspaces, runtime_dir, sandbox, broker, redis, foreign_file, nats_url_file)
    await broker.stop()
    await redis.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.fixture
def marker_dir(tmp_path: Path) -> Path:
    return tmp_path


async def run_script(
    world: World, settings: SandboxSettings, script: str, workspace: Path, tenant: str
) -> tuple[int, str, object]:
    """``script`` run by bash in a sandbox of ``settings`` for ``tenant``: (exit status, output, what was prepared)."""
    sandbox = Sandbox(settings, world.sandbox.identities, world.runtime_dir)
    sandbox.start()
    home = world.runtime_dir / "script-home"
    prepared = await sandbox.prepare(
        tenant=tenant,
        name=f"script-{uuid.uuid4().hex[:8]}",
        workspace=workspace,
        homes=[home],
        binaries=[],
        argv=["/bin/bash", "-c", script],
        runtime_env={},
        model_urls=[],
        home=home,
    )
    try:
        proc = await asyncio.create_subprocess_exec(
            *prepared.command,
            env={},
            cwd=workspace,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        return proc.returncode, out.decode(errors="replace"), prepared
    finally:
        await prepared.close()
