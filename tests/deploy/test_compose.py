"""Issue 41, item 3: deploy/compose.yaml gives every long-running service a healthcheck, starts the workers only
once the brokers and Redis are healthy, and puts Redis behind a password every worker's URL carries. (No
container engine runs here: the file is checked as Compose reads it, YAML merge keys resolved.)"""

from __future__ import annotations

from pathlib import Path

import yaml

COMPOSE = Path(__file__).resolve().parents[2] / "deploy" / "compose.yaml"


def _services() -> dict:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def test_issue41_every_long_running_service_has_a_healthcheck_and_workers_wait_for_healthy_brokers():
    services = _services()
    for name, service in services.items():
        if name == "broker-auth":  # a one-shot job: its completion is what NATS waits for
            continue
        check = service.get("healthcheck")
        assert check and check["test"][0] in ("CMD", "CMD-SHELL") and check["retries"] >= 1, name
    workers = {n: s for n, s in services.items() if s.get("image", "").startswith("treadle") and n != "broker-auth"}
    assert set(workers) >= {"gateway", "coordinator", "supervisor", "projector", "provider-host-1", "checkpoints-1"}
    for name, worker in workers.items():
        wants = {dep: cond["condition"] for dep, cond in worker["depends_on"].items()}
        assert wants == {d: "service_healthy" for d in ("nats-1", "nats-2", "nats-3", "redis")}, name
        port = "8700" if name == "gateway" else "9100"
        assert f"127.0.0.1:{port}/readyz" in worker["healthcheck"]["test"][-1], name
    assert "/healthz?js-enabled-only=true" in services["nats-1"]["healthcheck"]["test"][-1]
    assert services["nats-1"]["image"].endswith("-alpine")  # the scratch image has no wget to answer the check


def test_issue41_redis_requires_a_password_that_every_worker_url_carries():
    services = _services()
    redis = services["redis"]
    assert '--requirepass "$$REDIS_PASSWORD"' in redis["command"][-1]
    assert redis["environment"]["REDIS_PASSWORD"] == "${REDIS_PASSWORD:?set REDIS_PASSWORD}"  # refused when unset
    assert "REDISCLI_AUTH" in redis["healthcheck"]["test"][-1]
    for name, service in services.items():
        url = (service.get("environment") or {}).get("TREADLE_REDIS_URL")
        if url is not None:
            assert url == "redis://:${REDIS_PASSWORD:?set REDIS_PASSWORD}@redis:6379/0", name
