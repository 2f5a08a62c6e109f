"""The chart's optional monitoring objects, rendered by a real helm: the PrometheusRule (the
alerts of docs/operations.md, checked and unit-tested by a real ``promtool`` from Debian's
``prometheus`` package, which ``make test`` installs) and the Grafana dashboard ConfigMap (its
JSON, and every panel's query against the metrics the coordinator exports)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from prometheus_client.core import Metric
from test_chart import FULLNAME, KUBE_VERSION, NAMESPACE, Rendered, helm, render, tmp
from test_operations_doc import _rule_groups

from coordinator.observability import CoordinatorMetrics
from coordinator.status.batch_metrics import exported_families

pytestmark = pytest.mark.helm

__all__ = ["helm", "tmp"]  # fixtures, from test_chart

MONITORING = {
    "prometheusRule": {"enabled": True, "labels": {"release": "prom"}},
    "grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "Affinity"}},
    "serviceMonitor": {"enabled": True},
}
METRIC = re.compile(r"\b((?:affinity|kube)_[a-z_]+)\b")


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is missing: `make promtool` (Debian's prometheus package)")
    return path


def rules(rendered: Rendered) -> list[dict[str, Any]]:
    rule = rendered.one("PrometheusRule")
    assert rule["metadata"]["namespace"] == NAMESPACE
    assert rule["metadata"]["labels"]["release"] == "prom"
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return [r for group in groups for r in group["rules"]]


def exported_samples() -> set[str]:
    """Every sample name the coordinator's /metrics can carry."""
    suffixes = {
        "counter": ("_total", "_created"),
        "gauge": ("",),
        "histogram": ("_bucket", "_count", "_sum", "_created"),
    }
    families: list[Metric] = list(CoordinatorMetrics().registry.collect())
    families += exported_families()  # a streaming query's batches (affinity coordinator run)
    return {f.name + suffix for f in families for suffix in suffixes[f.type]}


def test_monitoring_objects_are_off_by_default(helm: str, tmp: Path) -> None:
    rendered = render(helm, tmp)
    assert not rendered.all("PrometheusRule")
    assert [c["metadata"]["name"] for c in rendered.all("ConfigMap")] == [FULLNAME]


def test_the_rule_holds_the_alerts_of_the_operations_guide(helm: str, tmp: Path) -> None:
    documented = {r["alert"]: r for group in _rule_groups() for r in group["rules"]}
    shipped = {r["alert"]: r for r in rules(render(helm, tmp, MONITORING))}
    assert list(shipped) == list(documented)
    for name, rule in shipped.items():
        doc = documented[name]
        assert rule["labels"]["severity"] == doc["labels"]["severity"], name
        assert rule.get("for") == doc.get("for"), name
        assert set(METRIC.findall(rule["expr"])) == set(METRIC.findall(doc["expr"])), name
        assert rule.get("annotations", {}) == doc.get("annotations", {}), name
        # Scoped to this release: its namespace and Service (the ServiceMonitor's `service`).
        for selector in re.findall(r"(?:affinity|kube)_[a-z_]+\{([^}]*)\}", rule["expr"]):
            assert f'namespace="{NAMESPACE}"' in selector, name
            assert f'="{FULLNAME}"' in selector, name


def test_additional_alert_labels(helm: str, tmp: Path) -> None:
    rule = {**MONITORING["prometheusRule"], "additionalAlertLabels": {"team": "data"}}
    for shipped in rules(render(helm, tmp, {"prometheusRule": rule})):
        assert shipped["labels"]["team"] == "data"
        assert shipped["labels"]["severity"]


def _write_rules(rendered: Rendered, folder: Path) -> Path:
    path = folder / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rendered.one("PrometheusRule")["spec"]["groups"]}))
    return path


def test_promtool_check_rules_passes(helm: str, tmp: Path) -> None:
    path = _write_rules(render(helm, tmp, MONITORING), tmp)
    done = subprocess.run(
        [promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 14 rules found" in done.stdout


def test_promtool_unit_tests_of_the_rules(helm: str, tmp: Path) -> None:
    """The rules fire on this release's series, not on another release's (promtool test rules)."""
    path = _write_rules(render(helm, tmp, MONITORING), tmp)
    ours = f'namespace="{NAMESPACE}", service="{FULLNAME}"'
    other = f'namespace="{NAMESPACE}", service="other-affinity-coordinator"'
    labels = {"namespace": NAMESPACE, "service": FULLNAME}
    timed_out = f'affinity_barrier_outcomes_total{{{ours}, outcome="timed_out", pod="a"}}'
    no_leader = {
        "exp_labels": {**labels, "severity": "critical"},
        "exp_annotations": {
            "summary": f"No affinity coordinator leader in {NAMESPACE}/{FULLNAME}",
            "description": _rule_groups()[0]["rules"][0]["annotations"]["description"],
        },
    }
    series = [
        {"series": f'affinity_is_leader{{{ours}, pod="a"}}', "values": "0x20"},
        {"series": f'affinity_is_leader{{{ours}, pod="b"}}', "values": "0x20"},
        {"series": f'affinity_is_leader{{{other}, pod="c"}}', "values": "1x20"},
        {"series": timed_out, "values": "0 0 1 1 1"},
    ]
    expected = [
        {"eval_time": "10m", "alertname": "AffinityNoLeader", "exp_alerts": [no_leader]},
        {
            "eval_time": "4m",
            "alertname": "AffinityBarrierTimeouts",
            "exp_alerts": [{"exp_labels": {**labels, "severity": "warning"}}],
        },
        {"eval_time": "10m", "alertname": "AffinityMultipleLeaders", "exp_alerts": []},
        {"eval_time": "10m", "alertname": "AffinityCoordinatorAbsent", "exp_alerts": []},
    ]
    tests = {
        "rule_files": [str(path)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": expected}],
    }
    spec = tmp / "rules_test.yaml"
    spec.write_text(yaml.safe_dump(tests))
    done = subprocess.run(
        [promtool(), "test", "rules", str(spec)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_unit_tests_of_the_streaming_alerts(helm: str, tmp: Path) -> None:
    """Tasks restoring in every batch for 20 minutes fire; a batch that restored nothing in the
    window, or a query that stopped writing batches, does not. Batches twice as slow as in
    the 2 hours before fire; steady ones do not (promtool test rules, 1-minute samples)."""
    rendered = render(helm, tmp, MONITORING)
    path = _write_rules(rendered, tmp)
    ours = f'namespace="{NAMESPACE}", service="{FULLNAME}"'
    labels = {"namespace": NAMESPACE, "service": FULLNAME, "severity": "warning"}
    where = {"{{ $labels.namespace }}": NAMESPACE, "{{ $labels.service }}": FULLNAME}
    annotations = {
        r["alert"]: {k: re.sub(r"\{\{ \$labels\.\w+ \}\}", lambda m: where[m[0]], v)
                     for k, v in r["annotations"].items()}
        for r in rules(rendered) if r["alert"].startswith("AffinityStreaming")
    }  # fmt: skip

    def case(restored: str, seconds: str, written: str, alerts: list[tuple[str, str, bool]]) -> Any:
        series = [
            {"series": f'affinity_streaming_batch_tasks{{{ours}, state="restored", pod="a"}}',
             "values": restored},
            {"series": f'affinity_streaming_batch_seconds{{{ours}, pod="a"}}', "values": seconds},
            {"series": f'affinity_streaming_batch_timestamp_seconds{{{ours}, pod="a"}}',
             "values": written},
        ]  # fmt: skip
        expected = [
            {
                "eval_time": at,
                "alertname": name,
                "exp_alerts": [{"exp_labels": labels, "exp_annotations": annotations[name]}]
                * fires,
            }
            for name, at, fires in alerts
        ]
        return {"interval": "1m", "input_series": series, "alert_rule_test": expected}

    restoring, growing = "AffinityStreamingTasksRestoring", "AffinityStreamingBatchTimeGrowing"
    now = "0+60x170"  # a batch written every minute (its timestamp: the evaluation time)
    steady, slower = "1x170", "1x120 5x50"  # seconds per batch: 5 s from 2 h on
    tests = [
        case("1x40", steady, now, [(restoring, "25m", True), (growing, "150m", False)]),
        case("1 1 1 0 1x36", slower, now, [(restoring, "15m", False), (growing, "150m", True)]),
        case("1x40", slower, "0x170", [(restoring, "30m", False), (growing, "150m", False)]),
    ]
    spec = tmp / "streaming_rules_test.yaml"
    spec.write_text(
        yaml.safe_dump({"rule_files": [str(path)], "evaluation_interval": "1m", "tests": tests})
    )
    done = subprocess.run(
        [promtool(), "test", "rules", str(spec)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_dashboard_configmap_for_the_grafana_sidecar(helm: str, tmp: Path) -> None:
    rendered = render(helm, tmp, MONITORING)
    (configmap,) = [c for c in rendered.all("ConfigMap") if c["metadata"]["name"] != FULLNAME]
    kubernetes_validate.validate(configmap, KUBE_VERSION, strict=True)
    assert configmap["metadata"]["name"] == f"{FULLNAME}-dashboard"
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["annotations"] == {"grafana_folder": "Affinity"}
    (name,) = configmap["data"]
    assert name.endswith(".json")
    dashboard = json.loads(configmap["data"][name])
    assert dashboard["uid"] == "affinity-coordinator" and dashboard["title"]
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert variables == {"datasource", "namespace", "service"}

    exported = exported_samples()
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    used: set[str] = set()
    for panel in panels:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = set(METRIC.findall(target["expr"]))
            assert names, f"{panel['title']}: {target['expr']}"
            unknown = names - exported
            assert not unknown, f"{panel['title']}: not exported by the coordinator: {unknown}"
            assert 'namespace="$namespace", service="$service"' in target["expr"]
            used |= names
    families = {re.sub(r"_(total|bucket|count|sum|created)$", "", n) for n in exported}
    shown = {re.sub(r"_(total|bucket|count|sum|created)$", "", n) for n in used}
    assert shown == families, f"metrics without a panel: {families - shown}"


def test_the_dashboard_may_go_to_grafanas_namespace(helm: str, tmp: Path) -> None:
    values = {"grafanaDashboard": {"enabled": True, "namespace": "monitoring"}}
    rendered = render(helm, tmp, values)
    dashboards = [c for c in rendered.all("ConfigMap") if c["metadata"]["name"] != FULLNAME]
    assert [d["metadata"]["namespace"] for d in dashboards] == ["monitoring"]
