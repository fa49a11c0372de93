"""Issue 23, item 4: the alert rules pass `promtool check rules` and their unit tests (`promtool test rules`:
each alert fires on the series of its trouble and stays quiet on a healthy fleet), with promtool from Debian's
prometheus package (scripts/ensure-promtool.sh, run by `make setup`); every metric the dashboard and the rules
query is one the code exports."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import yaml
from prometheus_client import REGISTRY

import treadle.runtime.metrics  # noqa: F401  (registers every family)

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"


def _promtool() -> str:
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "ensure-promtool.sh")], capture_output=True, text=True, cwd=ROOT
    )
    path = done.stdout.strip().splitlines()[-1]
    assert path != "missing", f"promtool is needed (make setup): {done.stderr}"
    return str(ROOT / path) if not path.startswith("/") else path


def test_alert_rules_pass_promtool_check_and_their_unit_tests():
    promtool = _promtool()
    check = subprocess.run([promtool, "check", "rules", "alerts.yaml"], cwd=MONITORING, capture_output=True, text=True)
    assert check.returncode == 0 and "SUCCESS: 6 rules found" in check.stdout, check.stdout + check.stderr
    tested = subprocess.run(
        [promtool, "test", "rules", "alerts.test.yaml"], cwd=MONITORING, capture_output=True, text=True
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    names = {r["alert"] for g in yaml.safe_load((MONITORING / "alerts.yaml").read_text())["groups"] for r in g["rules"]}
    assert {"TreadleRunsStuck", "TreadleConsumerLag", "TreadleProviderHostLost", "TreadleDeadLetters"} <= names


def _metric_names(expr: str) -> set[str]:
    expr = re.sub(r"\{[^}]*\}", "", re.sub(r"\[[^\]]*\]", "", expr))
    return {w for w in re.findall(r"[a-z_][a-z0-9_]*", expr) if w.startswith("treadle_")}


def test_every_queried_metric_is_exported_by_the_code():
    exported = {s.name for family in REGISTRY.collect() for s in family.samples if s.name.startswith("treadle_")}
    exported |= {f.name for f in REGISTRY.collect()}
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [r["expr"] for g in yaml.safe_load((MONITORING / "alerts.yaml").read_text())["groups"] for r in g["rules"]]
    queried = set().union(*(_metric_names(e) for e in exprs))
    # a labelled family has no samples until used: its family name (and _bucket/_count/_total forms) counts
    known = exported | {f"{n}{suffix}" for n in exported for suffix in ("_total", "_bucket", "_count", "_sum")}
    assert queried and queried <= known, queried - known
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"]) >= 12
