"""Issue 23, item 2: deploy/helm/treadle renders with the Helm 4 engine itself (helm-python-sdk: Helm SDK
v4.2.3 compiled in, pinned in the dev lock; no helm binary is installable here), passes `helm lint --strict`,
and every rendered manifest validates strictly against Kubernetes' JSON schemas (kubernetes-validate, 1.37)
but the ServiceMonitor (a CRD: checked by shape). What the chart promises is asserted on the manifests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from helm_python.chart import Chart, lint
from helm_python.errors import HelmError

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "treadle"
KUBERNETES = "1.37.0"
VALUES = {"secrets": {"natsPassword": "p", "openaiApiKey": "sk-x"}, "image": {"tag": "abc123"}}


def _render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    out = Chart.load(CHART).render(values or VALUES, name="t", namespace="treadle", is_install=True)
    return [doc for text in out.values() for doc in yaml.safe_load_all(text) if doc]


def _of(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def _containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    spec = workload["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def test_the_chart_lints_strict_and_renders_the_promised_resources():
    report = lint(CHART, VALUES, strict=True, kube_version=f"v{KUBERNETES}")
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == []
    docs = _render()
    listing = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in docs)
    assert listing == sorted(
        ["Secret/t-treadle", "ServiceMonitor/t-treadle", "ConfigMap/t-treadle-nats"]
        + [f"{kind}/t-treadle-{name}" for kind, name in [("StatefulSet", "nats"), ("StatefulSet", "workspace")]]
        + [f"Deployment/t-treadle-{w}" for w in ("gateway", "coordinator", "supervisor", "projector", "redis")]
        + [f"Service/t-treadle-{w}" for w in ("nats", "redis", "gateway", "coordinator", "supervisor", "projector")]
        + ["Service/t-treadle-workspace"]
        + [f"PodDisruptionBudget/t-treadle-{w}" for w in ("nats", "gateway", "coordinator", "supervisor", "projector")]
        + ["PodDisruptionBudget/t-treadle-workspace"]
    )


def test_every_rendered_manifest_is_valid_kubernetes():
    for doc in _render():
        if doc["kind"] == "ServiceMonitor":
            assert doc["apiVersion"] == "monitoring.coreos.com/v1"
            assert {e["port"] for e in doc["spec"]["endpoints"]} == {"metrics", "ckpt-metrics"}
            continue
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)  # raises on any unknown or mistyped field


def test_every_container_has_resources_a_security_context_and_a_pinned_image():
    docs = _render()
    workloads = {**_of(docs, "Deployment"), **_of(docs, "StatefulSet")}
    for name, workload in workloads.items():
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", name
        for c in _containers(workload):
            assert c["resources"]["requests"] and c["resources"]["limits"]["memory"], (name, c["name"])
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True, (name, c["name"])
            assert "ALL" in sc["capabilities"]["drop"], (name, c["name"])
            assert not c["image"].endswith(":latest") and ":" in c["image"], c["image"]
            if c["name"] != "provider-host":
                assert sc.get("runAsUser", pod["securityContext"].get("runAsUser")) != 0, (name, c["name"])
    # volumes the image's uid writes are mounted with fsGroup 10001
    for name in ("t-treadle-nats", "t-treadle-workspace"):
        assert workloads[name]["spec"]["template"]["spec"]["securityContext"]["fsGroup"] == 10001
    assert {c["image"] for w in workloads.values() for c in _containers(w) if c["name"] == "nats"} == {"nats:2.15.1"}
    assert {c["image"] for w in workloads.values() for c in _containers(w) if "treadle" in c["image"]} == {
        "treadle:abc123"
    }


def test_every_worker_is_probed_and_every_workload_has_a_disruption_budget():
    docs = _render()
    workloads = {**_of(docs, "Deployment"), **_of(docs, "StatefulSet")}
    for name, workload in workloads.items():
        for c in workload["spec"]["template"]["spec"]["containers"]:
            if c["name"] == "reloader":  # a sidecar with no port: NATS' own probes cover its pod
                continue
            assert "readinessProbe" in c and "livenessProbe" in c, (name, c["name"])
    budgets = {
        d["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"]
        for d in _of(docs, "PodDisruptionBudget").values()
    }
    assert budgets == {"nats", "gateway", "coordinator", "supervisor", "projector", "workspace-node"}


def test_workspace_nodes_have_stable_ids_and_checkpoints_route_to_the_node_holding_the_workspace():
    docs = _render({**VALUES, "workspaceNodes": {"replicas": 5}})
    nodes = _of(docs, "StatefulSet")["t-treadle-workspace"]
    assert nodes["spec"]["replicas"] == 5
    by_name = {c["name"]: {e["name"]: e for e in c["env"]} for c in nodes["spec"]["template"]["spec"]["containers"]}
    pod_name = {"valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    # each node is its own volume: its checkpoint service answers treadle.ckpt.<pod>.* and nothing else
    assert {k: v for k, v in by_name["provider-host"]["TREADLE_VOLUME"].items() if k != "name"} == pod_name
    assert {k: v for k, v in by_name["checkpoints"]["TREADLE_VOLUME"].items() if k != "name"} == pod_name
    assert {
        k: v for k, v in by_name["provider-host"]["TREADLE_PROVIDER_HOST_HOST_ID"].items() if k != "name"
    } == pod_name
    assert "OPENAI_API_KEY" in by_name["provider-host"] and "OPENAI_API_KEY" not in by_name["checkpoints"]


def test_replicated_workers_and_a_three_node_jetstream_cluster():
    docs = _render(
        {**VALUES, "coordinator": {"replicas": 4, "resources": {"requests": {"cpu": "1"}, "limits": {"memory": "1Gi"}}}}
    )
    assert _of(docs, "Deployment")["t-treadle-coordinator"]["spec"]["replicas"] == 4
    conf = _of(docs, "ConfigMap")["t-treadle-nats"]["data"]["nats-server.conf"]
    assert conf.count("nats-route://") == 3 and 'include "auth/auth.conf"' in conf
    env = {e["name"]: e for e in _containers(_of(docs, "Deployment")["t-treadle-gateway"])[0]["env"]}
    assert env["TREADLE_NATS_URL"]["value"].count("nats://") == 3
    assert env["TREADLE_STREAM_REPLICAS"]["value"] == "3"
    assert env["TREADLE_NATS_PASSWORD"]["valueFrom"]["secretKeyRef"]["key"] == "TREADLE_NATS_PASSWORD"


def test_an_external_redis_replaces_the_bundled_one():
    docs = _render({**VALUES, "redis": {"enabled": False, "externalUrl": "redis.example:6380/2"}})
    assert "t-treadle-redis" not in _of(docs, "Deployment")
    env = {e["name"]: e for e in _containers(_of(docs, "Deployment")["t-treadle-projector"])[0]["env"]}
    assert env["TREADLE_REDIS_URL"]["value"] == "redis://:$(REDIS_PASSWORD)@redis.example:6380/2"


def test_without_a_nats_password_or_secret_the_chart_refuses_to_render():
    with pytest.raises(HelmError, match="natsPassword"):
        _render({"image": {"tag": "x"}})
    docs = _render({"secrets": {"existingSecret": "mine"}})
    assert "Secret" not in {d["kind"] for d in docs}


def test_issue36_the_broker_store_is_its_own_volume_apart_from_the_workspaces():
    """A tenant filling the workspaces' disk must not take the broker's: JetStream's store_dir is a volume of its
    own per NATS pod (a PVC), never the workspace nodes' volume."""
    docs = _render()
    sets = _of(docs, "StatefulSet")
    nats = next(s for name, s in sets.items() if name.endswith("nats"))
    conf = _of(docs, "ConfigMap")["t-treadle-nats"]["data"]["nats-server.conf"]
    assert "store_dir: /data/jetstream" in conf
    mounts = {m["mountPath"]: m["name"] for c in _containers(nats) for m in c.get("volumeMounts", [])}
    claims = {t["metadata"]["name"] for t in nats["spec"].get("volumeClaimTemplates", [])}
    assert mounts["/data/jetstream"] in claims
    # the workspace nodes keep their disk in claims of their own StatefulSet (PVCs are never shared across sets)
    workspaces = [s for s in sets.values() if s is not nats]
    assert workspaces and all(s["spec"].get("volumeClaimTemplates") for s in workspaces)
