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
        + [
            f"Deployment/t-treadle-{w}"
            for w in ("gateway", "coordinator", "supervisor", "projector", "scheduler", "webhooks")
        ]
        + ["Deployment/t-treadle-redis"]
        + [f"Service/t-treadle-{w}" for w in ("nats", "redis", "gateway", "coordinator", "supervisor", "projector")]
        + ["Service/t-treadle-scheduler", "Service/t-treadle-webhooks"]
        + ["Service/t-treadle-workspace"]
        + [f"PodDisruptionBudget/t-treadle-{w}" for w in ("nats", "gateway", "coordinator", "supervisor", "projector")]
        + ["PodDisruptionBudget/t-treadle-scheduler", "PodDisruptionBudget/t-treadle-webhooks"]
        + ["PodDisruptionBudget/t-treadle-workspace", "ServiceAccount/t-treadle"]
        + [f"NetworkPolicy/t-treadle-{p}" for p in ("default-deny", "nats", "redis", "gateway", "metrics")]
        + ["NetworkPolicy/t-treadle-workspace-egress"]
    )


EVERYTHING = {
    **VALUES,
    "prometheusRule": {"enabled": True},
    "dashboards": {"enabled": True},
    "gateway": {"ingress": {"enabled": True, "className": "nginx", "tls": [{"secretName": "t", "hosts": ["a.b"]}]}},
    "tracing": {"otlpEndpoint": "http://c:4317", "protocol": "grpc", "headersSecretKey": "OTLP_HEADERS"},
}


@pytest.mark.parametrize("values", [VALUES, EVERYTHING], ids=["defaults", "every-option"])
def test_every_rendered_manifest_is_valid_kubernetes(values):
    for doc in _render(values):
        if doc["kind"] == "ServiceMonitor":
            assert doc["apiVersion"] == "monitoring.coreos.com/v1"
            assert {e["port"] for e in doc["spec"]["endpoints"]} == {"metrics", "ckpt-metrics"}
            continue
        if doc["kind"] == "PrometheusRule":  # a CRD too: its rules are deploy/monitoring/alerts.yaml's
            assert doc["apiVersion"] == "monitoring.coreos.com/v1"
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
    assert budgets == {
        "nats",
        "gateway",
        "coordinator",
        "supervisor",
        "projector",
        "scheduler",
        "webhooks",
        "workspace-node",
    }


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


def _peers(rule: dict[str, Any], key: str = "from") -> set[str]:
    """The components of this release a NetworkPolicy rule lets through ('*' for a peer that is not ours)."""
    found: set[str] = set()
    for peer in rule.get(key, []):
        expressions = peer.get("podSelector", {}).get("matchExpressions", [])
        found |= {v for e in expressions for v in e["values"]} if expressions else {"*"}
    return found


def test_issue41_only_the_workers_reach_nats_and_redis_and_only_the_gateway_is_open():
    docs = _render()
    policies = _of(docs, "NetworkPolicy")
    deny = policies["t-treadle-default-deny"]
    assert deny["spec"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/instance": "t"}}
    assert deny["spec"]["policyTypes"] == ["Ingress"] and "ingress" not in deny["spec"]  # nothing unless allowed
    workers = {"gateway", "coordinator", "supervisor", "projector", "webhooks", "workspace-node"}
    by_port = {r["ports"][0]["port"]: r for r in policies["t-treadle-nats"]["spec"]["ingress"]}
    assert _peers(by_port[4222]) == workers | {"scheduler"} and _peers(by_port[6222]) == {"nats"}
    assert by_port[8222]["from"] == [{"namespaceSelector": {}}]  # the monitor port to scrapers only
    (redis,) = policies["t-treadle-redis"]["spec"]["ingress"]
    assert _peers(redis) == workers and redis["ports"] == [{"port": 6379, "protocol": "TCP"}]
    (gateway,) = policies["t-treadle-gateway"]["spec"]["ingress"]
    assert "from" not in gateway and gateway["ports"] == [{"port": 8700, "protocol": "TCP"}]  # from anywhere
    # no other policy opens a port to everyone: the rest take only their scrapes
    (scrapes,) = policies["t-treadle-metrics"]["spec"]["ingress"]
    assert scrapes["from"] == [{"namespaceSelector": {}}] and {p["port"] for p in scrapes["ports"]} == {9100, 9101}
    # the workspace nodes leave only for DNS, NATS, Redis, the gateway's MCP and the model APIs on 443
    egress = policies["t-treadle-workspace-egress"]["spec"]
    assert egress["policyTypes"] == ["Egress"]
    assert [_peers(r, "to") for r in egress["egress"][1:4]] == [{"nats"}, {"redis"}, {"gateway"}]
    model_apis = egress["egress"][4]
    assert model_apis["ports"] == [{"port": 443, "protocol": "TCP"}]
    assert "10.0.0.0/8" in model_apis["to"][0]["ipBlock"]["except"]
    narrowed = _render(
        {**VALUES, "networkPolicy": {"gatewayFrom": [{"namespaceSelector": {"matchLabels": {"x": "y"}}}]}}
    )
    (rule,) = _of(narrowed, "NetworkPolicy")["t-treadle-gateway"]["spec"]["ingress"]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"x": "y"}}}]
    assert "NetworkPolicy" not in {d["kind"] for d in _render({**VALUES, "networkPolicy": {"enabled": False}})}


def test_issue41_no_pod_mounts_an_api_token_and_nats_and_replicas_spread_over_nodes():
    docs = _render()
    (account,) = _of(docs, "ServiceAccount").values()
    assert account["automountServiceAccountToken"] is False
    workloads = {**_of(docs, "Deployment"), **_of(docs, "StatefulSet")}
    for name, workload in workloads.items():
        pod = workload["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False and pod["serviceAccountName"] == "t-treadle", name
    nats = workloads["t-treadle-nats"]["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    (term,) = nats["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "nats"
    soft = _render({**VALUES, "nats": {"antiAffinity": "soft"}})
    affinity = _of(soft, "StatefulSet")["t-treadle-nats"]["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert list(affinity) == ["preferredDuringSchedulingIgnoredDuringExecution"]
    for name in ("gateway", "coordinator", "supervisor", "projector", "webhooks"):
        spread = workloads[f"t-treadle-{name}"]["spec"]["template"]["spec"]["topologySpreadConstraints"]
        assert {c["topologyKey"] for c in spread} == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}
        assert all(c["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == name for c in spread)


def test_issue41_optional_ingress_alert_rules_and_dashboards():
    docs = _render(EVERYTHING)
    (ingress,) = _of(docs, "Ingress").values()
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert (
        backend == {"name": "t-treadle-gateway", "port": {"name": "http"}}
        and ingress["spec"]["ingressClassName"] == "nginx"
    )
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    alerts = yaml.safe_load((CHART.parents[1] / "monitoring" / "alerts.yaml").read_text())
    assert rule["spec"]["groups"] == alerts["groups"]  # the same rules promtool checks, templates untouched
    assert "{{ $value | humanizeDuration }}" in str(rule["spec"])
    dashboards = _of(docs, "ConfigMap")["t-treadle-dashboards"]
    assert dashboards["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert (
        dashboards["data"]["treadle.json"] == (CHART.parents[1] / "monitoring" / "grafana-dashboard.json").read_text()
    )
    env = {e["name"]: e for e in _containers(_of(docs, "Deployment")["t-treadle-gateway"])[0]["env"]}
    assert (
        env["OTEL_EXPORTER_OTLP_PROTOCOL"]["value"] == "grpc" and env["TREADLE_GATEWAY_ACCESS_LOG"]["value"] == "true"
    )
    assert env["OTEL_EXPORTER_OTLP_HEADERS"]["valueFrom"]["secretKeyRef"]["key"] == "OTLP_HEADERS"
    assert "Ingress" not in {d["kind"] for d in _render()} and "PrometheusRule" not in {d["kind"] for d in _render()}


@pytest.mark.parametrize(
    "bad",
    [
        {"logFormat": "xml"},
        {"nats": {"replicas": 2}},
        {"nats": {"antiAffinity": "maybe"}},
        {"tracing": {"protocol": "http/json"}},
        {"gateway": {"replicas": 0}},
        {"networkPolicy": {"enabeld": True}},
        {"workspaceNodes": {"storage": "lots"}},
    ],
)
def test_issue41_the_values_schema_refuses_what_the_chart_cannot_mean(bad):
    with pytest.raises(HelmError):
        _render({**VALUES, **bad})


# Pod Security Standards (kubernetes.io/docs/concepts/security/pod-security-standards): what "restricted" checks
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}  # fmt: skip
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}  # fmt: skip


def _violations(workload: dict[str, Any]) -> set[str]:
    """The Pod Security rules a workload's pods break, as the rules' short names ('' for none)."""
    pod = workload["spec"]["template"]["spec"]
    found: set[str] = set()
    if any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")):
        found.add("host-namespaces")
    if any(not (set(v) - {"name"}) <= RESTRICTED_VOLUMES for v in pod.get("volumes", [])):
        found.add("volume-types")
    for c in _containers(workload):
        sc = {**pod.get("securityContext", {}), **c.get("securityContext", {})}  # the container's wins
        if sc.get("privileged"):
            found.add("privileged")
        added = set(sc.get("capabilities", {}).get("add", []))
        if added - BASELINE_CAPABILITIES:
            found.add("capabilities-baseline")
        if added - {"NET_BIND_SERVICE"} or "ALL" not in sc.get("capabilities", {}).get("drop", []):
            found.add("capabilities-restricted")
        if sc.get("seccompProfile", {}).get("type") not in ("RuntimeDefault", "Localhost"):
            found.add("seccomp")
        if sc.get("allowPrivilegeEscalation") is not False:
            found.add("privilege-escalation")
        if sc.get("runAsNonRoot") is not True or sc.get("runAsUser") == 0:
            found.add("run-as-non-root")
    return found


def test_issue41_every_pod_but_the_workspace_nodes_meets_restricted_and_those_need_privileged_for_two_reasons():
    """docs/operations.md, Pod Security: the workspace nodes' provider host needs SYS_ADMIN and seccomp
    Unconfined (beyond baseline: level privileged) and runs as uid 0; it is no privileged container and uses
    no host namespace or host path. Every other pod meets restricted."""
    docs = _render(EVERYTHING)
    workloads = {**_of(docs, "Deployment"), **_of(docs, "StatefulSet")}
    breaking = {name: _violations(w) for name, w in workloads.items()}
    assert breaking.pop("t-treadle-workspace") == {
        "capabilities-baseline",  # SYS_ADMIN: why the level is privileged
        "seccomp",  # Unconfined: likewise
        "capabilities-restricted",
        "run-as-non-root",
    }
    assert breaking == {name: set() for name in breaking}, breaking
