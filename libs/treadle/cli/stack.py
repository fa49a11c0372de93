"""The embedded deployment: nats-server with JetStream, redis-server and the eight workers, all supervised OS
processes (restarted with backoff when they die). ``treadle up`` runs it; the e2e and chaos tests drive it (and kill parts of it)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

import httpx

from ..ops.broker_auth import BrokerAuth
from ..ops.processes import ProcessSupervisor
from ..ops.servers import NatsCluster, NatsServer, RedisServer, free_port
from ..runtime import partitions

WORKERS = {
    "gateway": "treadle.gateway",
    "coordinator": "treadle.coordinator",
    "supervisor": "treadle.supervisor",
    "provider-host": "treadle.provider_host",
    "checkpoints": "treadle.checkpoints_service",
    "projector": "treadle.projector",
    "scheduler": "treadle.scheduler",
    "webhooks": "treadle.deliveries",  # the webhook delivery worker (docs/webhooks.md)
}
REPLICATED = (
    "coordinator",
    "supervisor",
    "projector",
    "scheduler",
    "webhooks",
)  # thread-keyed workers that share partitions by lease
_PREFIX = {
    "gateway": "GATEWAY",
    "coordinator": "COORDINATOR",
    "supervisor": "SUPERVISOR",
    "provider-host": "PROVIDER_HOST",
    "checkpoints": "CHECKPOINTS",
    "projector": "PROJECTOR",
    "scheduler": "SCHEDULER",
    "webhooks": "WEBHOOKS",
}


class Stack:
    def __init__(
        self,
        state_dir: Path,
        *,
        nats_url: str | None = None,
        redis_url: str | None = None,
        gateway_port: int | None = None,
        env: dict[str, str] | None = None,
        on_output: Callable[[str, str], None] | None = None,
        provider_hosts: int = 1,
        nats_cluster: int = 1,
        replicas: int = 1,
        workspace_nodes: int = 1,
    ) -> None:
        """``nats_cluster``: 1 runs one nats-server (the default, and the quickest); 3 or more a JetStream
        cluster of that many nodes, with every stream and bucket replicated on 3 of them. ``replicas``: how many
        of each thread-keyed worker (coordinator, supervisor, projector, scheduler, webhooks) run, sharing the partitions by lease.
        ``workspace_nodes``: 1 keeps every workspace on volume "local" in the state dir; N runs N workspace nodes
        on this machine, volumes node-1..node-N, each with its own directory (``nodes/node-<i>``: workspaces,
        checkpoints, runtimes), checkpoint service and ``provider_hosts`` provider hosts."""
        if nats_cluster != 1 and nats_cluster < 3:
            raise ValueError("nats_cluster is 1 (one server) or at least 3 nodes")
        if workspace_nodes < 1:
            raise ValueError("workspace_nodes must be at least 1")
        self.state_dir = Path(state_dir).resolve()
        self.nats_cluster = nats_cluster
        self._nats_url, self._redis_url = nats_url, redis_url
        self.gateway_port = gateway_port or free_port()
        self._env = env or {}
        self.nats: NatsServer | NatsCluster | None = None
        self.redis: RedisServer | None = None
        self.processes = ProcessSupervisor(on_output=on_output)
        self.health_ports: dict[str, int] = {}
        # Workspace nodes: volume -> its directory. One node is the state dir itself, volume "local" (as always).
        self.nodes = (
            {"local": self.state_dir}
            if workspace_nodes == 1
            else {f"node-{i}": self.state_dir / "nodes" / f"node-{i}" for i in range(1, workspace_nodes + 1)}
        )
        # Provider hosts: "provider-host" is host-1; more run as "provider-host-<n>" with host id host-<n>. On
        # several nodes each node's are "provider-host-node-<i>[-<n>]", host ids "node-<i>-host-<n>".
        self.host_processes: dict[str, str] = {}
        self.volume_of: dict[str, str] = {}  # process name of a node's worker -> its volume
        for volume in self.nodes:
            suffix = "" if workspace_nodes == 1 else f"-{volume}"
            for n in range(1, provider_hosts + 1):
                host_id = f"host-{n}" if workspace_nodes == 1 else f"{volume}-host-{n}"
                name = f"provider-host{suffix}" if n == 1 else f"provider-host{suffix}-{n}"
                self.host_processes[host_id] = name
                self.volume_of[name] = volume
            self.volume_of[f"checkpoints{suffix}"] = volume
        # Replicated workers: "coordinator" is the first replica, then "coordinator-2", … (the replica name).
        if replicas < 1:
            raise ValueError("replicas must be at least 1")
        self.replicas = {
            kind: [kind if n == 1 else f"{kind}-{n}" for n in range(1, replicas + 1)] for kind in REPLICATED
        }

    def workspaces(self, volume: str = "local") -> Path:
        """The workspace root of ``volume`` (a workspace node's, or the state dir's on one node)."""
        return self.nodes[volume] / "workspaces"

    def node_dir_of(self, tenant: str, thread: str) -> Path:
        """The state dir of the node holding the thread's own workspace (``threads/<thread>``): its workspace
        root and its checkpoint service's shadow repositories are there (the first node when none holds it)."""
        held = [d for d in self.nodes.values() if (d / "workspaces" / tenant / "threads" / thread).is_dir()]
        return held[0] if held else next(iter(self.nodes.values()))

    def workspace_of(self, tenant: str, thread: str) -> Path:
        return self.node_dir_of(tenant, thread) / "workspaces" / tenant / "threads" / thread

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.gateway_port}"

    @property
    def nats_url(self) -> str:
        if self._nats_url:
            return self._nats_url
        assert self.nats is not None, "the stack's own broker is made by start()"
        return self.nats.url

    @property
    def nats_address(self) -> str:
        """The broker URL without the service user's credentials (what tenant consumers are given)."""
        return self.nats.address if self.nats else self.nats_url

    @property
    def redis_url(self) -> str:
        if self._redis_url:
            return self._redis_url
        assert self.redis is not None, "the stack's own Redis is made by start()"
        return self.redis.url

    def worker_env(self) -> dict[str, str]:
        env = {
            "TREADLE_NATS_URL": self.nats_url,
            "TREADLE_REDIS_URL": self.redis_url,
            "TREADLE_STATE_DIR": str(self.state_dir),
        }
        if self.nats_cluster > 1:
            env["TREADLE_STREAM_REPLICAS"] = "3"  # a majority of 3 survives one node; more copies only cost
            # Heartbeats stall while the hosts bucket elects a new leader after a node loss (measured 4-8 s,
            # plus a heartbeat period): that must not read as a dead provider host (the default is 10 s).
            env["TREADLE_PROVIDER_HOST_HOST_EXPIRY_SECONDS"] = "20"
        return {**env, **self._env}

    async def start(self, timeout: float = 60.0) -> None:
        """Start everything; a stopped stack starts again on the same ports and state (as ``treadle up`` does on
        the same state dir)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self._nats_url is None:
            nats_dir = self.state_dir / "nats"
            if self.nats is None:
                if self.nats_cluster > 1:  # a cluster keeps the deployment default
                    self.nats = NatsCluster(nats_dir, self.nats_cluster)
                else:  # one broker on this machine: partitions for its cores (a stack made before keeps its count)
                    auth = BrokerAuth(
                        nats_dir, default_partitions=partitions.for_machine(len(self.replicas["coordinator"]))
                    )
                    self.nats = NatsServer(nats_dir, auth=auth)
            await self.nats.start()
            self.nats.supervise()  # restarted like a worker when it dies
            if self.nats_cluster > 1:
                await self._ensure_streams()
        if self._redis_url is None:
            if self.redis is None:
                self.redis = RedisServer(self.state_dir / "redis")
            await self.redis.start()
            self.redis.supervise()
        if not self.health_ports:
            self._add_workers()
        await self.processes.start()
        await self.wait_ready(timeout)

    def _add_workers(self) -> None:
        base = self.worker_env()
        for kind, module in WORKERS.items():
            hosts: list[tuple[str | None, str]]  # (host id, process name)
            if kind == "provider-host":
                hosts = list(self.host_processes.items())
            elif kind == "checkpoints":
                hosts = [(None, name) for name, volume in self.volume_of.items() if name.startswith("checkpoints")]
            else:
                hosts = [(None, name) for name in self.replicas.get(kind, [kind])]
            for host_id, name in hosts:
                env = dict(base)
                if host_id is not None and len(self.host_processes) > 1:
                    env["TREADLE_PROVIDER_HOST_HOST_ID"] = host_id
                if len(self.nodes) > 1 and name in self.volume_of:  # a workspace node's own volume and directory
                    volume = self.volume_of[name]
                    env["TREADLE_VOLUME"] = volume
                    env["TREADLE_STATE_DIR"] = str(self.nodes[volume])
                if kind in self.replicas:
                    env["TREADLE_REPLICA"] = name
                if name == "gateway":
                    env["TREADLE_GATEWAY_PORT"] = str(self.gateway_port)
                    self.health_ports[name] = self.gateway_port
                else:
                    port = free_port()
                    env[f"TREADLE_{_PREFIX[kind]}_METRICS_PORT"] = str(port)
                    self.health_ports[name] = port
                self.processes.add(name, [sys.executable, "-m", module], env)

    async def _ensure_streams(self) -> None:
        """Create the replicated streams and buckets once, before the workers ask a fresh cluster for the
        same at the same moment (each would wait on the others' creations and time out)."""
        import nats

        from ..eventlog import streams
        from ..runtime import broker_urls

        nc = await nats.connect(**broker_urls.parse(self.nats_url).connect_options(), name="treadle-up")
        try:
            await streams.ensure(nc.jetstream(), 3)
        finally:
            await nc.close()

    async def wait_ready(self, timeout: float = 60.0, names: list[str] | None = None) -> None:
        """Every worker answers /readyz (workers answer only once they consume)."""
        async with httpx.AsyncClient(timeout=1.0) as http:

            async def ready(name: str) -> None:
                url = f"http://127.0.0.1:{self.health_ports[name]}/readyz"
                while True:
                    try:
                        if (await http.get(url)).status_code == 200:
                            return
                    except httpx.HTTPError:
                        pass
                    await asyncio.sleep(0.05)  # polling a process that is still starting

            async with asyncio.timeout(timeout):
                await asyncio.gather(*(ready(n) for n in names or self.health_ports))

    async def restart(self, timeout: float = 60.0) -> None:
        """A graceful stop of everything (what SIGTERM to ``treadle up`` does), then a start on the same state."""
        await self.stop()
        await self.start(timeout)

    async def stop(self) -> None:
        await self.processes.stop()
        if self.redis:
            await self.redis.stop()
        if self.nats:
            await self.nats.stop()

    async def __aenter__(self) -> Stack:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
