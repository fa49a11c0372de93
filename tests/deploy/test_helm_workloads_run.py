"""Issue 35: the Helm chart's topology works. Every workload is started as a process with exactly the
environment the chart renders for it (two workspace nodes: each pod its own volume, named after the pod; the
control-plane workers with no volume of their own), on this machine against the test's NATS and Redis, with
what only a cluster has substituted: addresses and ports (loopback, free ports), paths (a directory per pod
for its mounts), the broker's credentials and stream replicas (one test broker). A thread is created on one of
the nodes and a run plays to completion there."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import httpx
import nats
import yaml
from helm_python.chart import Chart

from tests.support.api import Api
from tests.support.helpers import quiet
from treadle.ops.processes import ProcessSupervisor
from treadle.ops.servers import free_port
from treadle.ops.tokens import TokenStore

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "treadle"
VALUES = {
    "secrets": {"natsPassword": "p"},
    "image": {"tag": "abc123"},
    "workspaceNodes": {"replicas": 2},
}
MODULES = {  # deploy/entrypoint.sh: the container's first argument names the worker
    "gateway": "treadle.gateway",
    "coordinator": "treadle.coordinator",
    "supervisor": "treadle.supervisor",
    "projector": "treadle.projector",
    "webhooks": "treadle.deliveries",
    "provider-host": "treadle.provider_host",
    "checkpoints": "treadle.checkpoints_service",
}
IMAGE_STATE_DIR = "/var/lib/treadle"  # deploy/Dockerfile's TREADLE_STATE_DIR, where the pods mount their volume


def _pods() -> list[tuple[str, dict[str, Any]]]:
    """(pod name, container) for every treadle container of every pod the chart makes."""
    out = Chart.load(CHART).render(VALUES, name="t", namespace="treadle", is_install=True)
    docs = [doc for text in out.values() for doc in yaml.safe_load_all(text) if doc]
    pods = []
    for doc in docs:
        if doc["kind"] not in ("Deployment", "StatefulSet"):
            continue
        name, replicas = doc["metadata"]["name"], doc["spec"].get("replicas", 1)
        for i in range(replicas):
            pod = f"{name}-{i}" if doc["kind"] == "StatefulSet" else f"{name}-7d9f8b-{i}"  # as Kubernetes names them
            for container in doc["spec"]["template"]["spec"]["containers"]:
                if (container.get("args") or [""])[0] in MODULES:
                    pods.append((pod, container))
    return pods


def _env(pod: str, container: dict[str, Any], nats_url: str, redis_url: str, root: Path) -> dict[str, str]:
    """The container's environment as Kubernetes would give it, with the cluster's addresses, ports and paths
    swapped for this machine's. Any variable this does not know how to give fails the test: the chart changed."""
    env = {"TREADLE_STATE_DIR": str(root / pod)}  # the image's, under this test's directory
    for var in container["env"]:
        name = var["name"]
        if "value" in var:
            env[name] = var["value"]
        elif var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[name] = pod
        elif var.get("valueFrom", {}).get("secretKeyRef"):
            continue  # the broker's credentials and model keys: the test's broker has no users
        else:
            raise AssertionError(f"{pod}/{container['name']}: cannot give {var}")
    for name, value in list(env.items()):
        if name == "TREADLE_NATS_URL":
            env[name] = nats_url
        elif name == "TREADLE_NATS_USER":
            del env[name]
        elif name == "TREADLE_REDIS_URL":
            env[name] = redis_url
        elif name == "TREADLE_STREAM_REPLICAS":
            env[name] = "1"
        elif name.endswith("_HOST") and value == "0.0.0.0":
            env[name] = "127.0.0.1"
        elif name.endswith("_PORT"):
            env[name] = str(free_port())
        elif value.startswith(IMAGE_STATE_DIR):
            env[name] = str(root / pod) + value[len(IMAGE_STATE_DIR) :]
    return env


async def _ready(ports: list[int], timeout: float = 60) -> None:
    async with httpx.AsyncClient(timeout=1.0) as http:

        async def one(port: int) -> None:
            while True:
                try:
                    if (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.05)  # polling a process that is still starting

        async with asyncio.timeout(timeout):
            await asyncio.gather(*(one(p) for p in ports))


async def test_a_thread_is_created_and_runs_with_the_environment_the_chart_renders(nats_url, redis_url, tmp_path):
    processes = ProcessSupervisor(on_output=quiet)
    ports, gateway, volumes = [], None, set()
    for pod, container in _pods():
        env = _env(pod, container, nats_url, redis_url, tmp_path)
        worker = container["args"][0]
        port = next(int(v) for k, v in env.items() if k.endswith("_PORT"))
        ports.append(port)
        if worker == "gateway":
            gateway = f"http://127.0.0.1:{port}"
        if "TREADLE_VOLUME" in env:
            volumes.add(env["TREADLE_VOLUME"])
        processes.add(f"{pod}/{container['name']}", [sys.executable, "-m", MODULES[worker]], env)
    assert gateway is not None and volumes == {"t-treadle-workspace-0", "t-treadle-workspace-1"}
    await processes.start()
    nc = await nats.connect(nats_url)
    try:
        await _ready(ports)
        api = Api(gateway, await TokenStore(nc.jetstream()).create("helm", "alice"), "helm")
        try:
            async with httpx.AsyncClient(base_url=gateway, headers=api.headers, timeout=30) as http:
                created = await http.post("/v1/threads", json={"title": "on a workspace node"})
            assert created.status_code == 201, created.text  # main: 503 checkpoint service (local) did not answer
            thread = created.json()["thread_id"]
            sent = await api.send(thread, "hello")
            run = await api.wait_run(sent["run_id"], timeout=60)
            assert run["checkpoint_id"] is not None  # captured by the checkpoint service of the thread's node
            doc = await api.thread(thread)
            home = doc["thread"]["volume"]
            assert home in volumes
            assert (tmp_path / home / "workspaces" / "helm" / "threads" / thread).is_dir()  # on its node, only
            other = next(v for v in volumes if v != home)
            assert not (tmp_path / other / "workspaces" / "helm" / "threads" / thread).exists()
        finally:
            await api.close()
    finally:
        await nc.close()
        await processes.stop()
