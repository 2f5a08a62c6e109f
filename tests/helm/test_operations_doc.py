"""docs/operations.md: its example alert rules parse and use the coordinator's metric names."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"

METRICS = (
    "affinity_is_leader",
    "affinity_job_model_version",
    "affinity_rebalances_total",
    "affinity_rebalance_duration_seconds",
    "affinity_barrier_outcomes_total",
    "affinity_tasks_moved_total",
    "affinity_locality_kept_ratio",
    "affinity_grouper_errors_total",
    "affinity_zk_session_expirations_total",
)


def _rule_groups() -> list[dict[str, Any]]:
    text = DOC.read_text()
    for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
        data = yaml.safe_load(block)
        if isinstance(data, dict) and "groups" in data:
            groups: list[dict[str, Any]] = data["groups"]
            return groups
    raise AssertionError("docs/operations.md has no Prometheus rules block")


def test_alert_rules_are_well_formed() -> None:
    rules = [rule for group in _rule_groups() for rule in group["rules"]]
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names)), "alert names are unique"
    for rule in rules:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert rule["expr"].strip(), rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}
        if "for" in rule:
            assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]
        expr = rule["expr"]
        assert expr.count("(") == expr.count(")"), f"{rule['alert']}: unbalanced parentheses"


def test_alert_rules_cover_every_metric() -> None:
    exprs = " ".join(rule["expr"] for group in _rule_groups() for rule in group["rules"])
    missing = [m for m in METRICS if m != "affinity_job_model_version" and m not in exprs]
    assert not missing, f"no alert uses {missing}"
    text = DOC.read_text()
    assert all(m in text for m in METRICS)
    assert 'outcome="timed_out"' in exprs


def test_incident_section_explains_both_commands() -> None:
    text = DOC.read_text()
    for command in ("affinity jobmodel show", "affinity locality show"):
        assert command in text
    for heading in (
        "## Install",
        "## Configure",
        "## Upgrade",
        "## Scale",
        "## Metrics and alerts",
    ):
        assert heading in text
