"""docs/operations.md and docs/spark.md, "a stateful Spark job on Kubernetes": the steps they
give are the chart's and the command's. The values block renders; every command and `--conf`
of the steps is a line the chart's NOTES print for those values; the `affinity spark
pod-template` they run parses with the real command line and names the objects the chart
creates."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_chart import NAMESPACE, RELEASE, _notes, helm, render, tmp

from coordinator.cli import build_parser
from coordinator.config import load_config

pytestmark = pytest.mark.helm

__all__ = ["helm", "tmp"]  # fixtures, from test_chart

DOCS = Path(__file__).resolve().parents[2] / "docs"
OPERATIONS = DOCS / "operations.md"
SPARK = DOCS / "spark.md"


def _section(path: Path, heading: str) -> str:
    text = path.read_text()
    start = text.index(heading)
    level = heading.split(" ", 1)[0]
    following = re.search(rf"^{level} ", text[start + len(heading) :], re.M)
    return text[start : start + len(heading) + following.start()] if following else text[start:]


def _blocks(text: str, language: str) -> list[str]:
    return [b for b in re.findall(rf"```{language}\n(.*?)```", text, re.S)]


def _command_lines(block: str) -> list[str]:
    """The block's lines, without indentation and line continuations."""
    return [line.strip().removesuffix("\\").strip() for line in block.splitlines() if line.strip()]


def _doc_values() -> dict[str, Any]:
    section = _section(OPERATIONS, "## A stateful Spark job on Kubernetes")
    (block,) = [b for b in _blocks(section, "yaml") if "spark:" in b]
    values: dict[str, Any] = yaml.safe_load(block)
    return values


def _steps() -> list[str]:
    """Every command line of the two step-by-steps."""
    operations = _section(OPERATIONS, "### Step by step")
    spark = _section(SPARK, "### A stateful job on Kubernetes with the chart, step by step")
    lines = []
    for block in [*_blocks(operations, "sh"), *_blocks(spark, "sh")]:
        lines += _command_lines(block)
    return lines


def test_the_documented_values_install_with_the_state_folders_set(helm: str, tmp: Path) -> None:
    values = _doc_values()
    assert values["spark"]["enabled"] is True
    rendered = render(helm, tmp, values)
    config = load_config(
        data=yaml.safe_load(rendered.job_yaml()), environ={"AFFINITY_ZK_CONNECT": "zk:2181"}
    )
    assert config.state.local_dir == "/var/lib/affinity-state"
    assert config.state.checkpoint_dir == "/mnt/durable/clicks"
    names = {d["metadata"]["name"] for d in rendered.docs}
    for name in ("spark", "spark-driver", "spark-executor"):
        assert f"{RELEASE}-affinity-coordinator-{name}" in names


def test_every_step_is_what_the_chart_prints(helm: str, tmp: Path) -> None:
    notes = {
        line.strip().removesuffix("\\").strip()
        for line in _notes(helm, tmp, _doc_values()).splitlines()
    }
    steps = _steps()
    assert sum(line.startswith("--conf ") for line in steps) >= 2 * 11
    assert sum("affinity spark pod-template" in line for line in steps) == 2
    checked = 0
    for line in steps:
        if line.startswith("kubectl") and " get pods " in line:
            continue  # checked below against the labels the chart gives the job's pods
        if line.startswith(("kubectl", "spark-submit", "--conf", "local://")):
            assert line in notes, f"a documented step the chart does not print: {line}"
            checked += 1
    assert checked == len([line for line in steps if " get pods " not in line])


def test_the_documented_checks_name_the_charts_objects(helm: str, tmp: Path) -> None:
    rendered = render(helm, tmp, _doc_values())
    (configmap,) = [
        c for c in rendered.all("ConfigMap") if c["metadata"]["name"].endswith("-spark")
    ]
    labels = yaml.safe_load(configmap["data"]["driver-pod-template.yaml"])["metadata"]["labels"]
    selectors = [line for line in _steps() if " get pods " in line]
    assert selectors
    for line in selectors:
        words = shlex.split(line)
        assert words[1:3] == ["-n", NAMESPACE]
        selector = dict(pair.split("=", 1) for pair in words[words.index("-l") + 1].split(","))
        assert selector == {**labels, "spark-role": "executor"}


def test_the_documented_command_parses_and_names_the_executors_account(
    helm: str, tmp: Path
) -> None:
    rendered = render(helm, tmp, _doc_values())
    accounts = {d["metadata"]["name"] for d in rendered.all("ServiceAccount")}
    parser = build_parser()
    for line in _steps():
        if "affinity spark pod-template" not in line:
            continue
        words = shlex.split(line.split(" -- ", 1)[1].split(" > ", 1)[0])
        assert words[0] == "affinity"
        args = parser.parse_args(words[1:])
        assert args.config == "/etc/affinity/job.yaml"  # the chart's ConfigMap, in the pod
        assert args.service_account in accounts
        assert args.label == ["affinity-spark-job=clicks-affinity-coordinator"]


def test_the_documented_usage_lists_the_commands_options() -> None:
    section = _section(SPARK, "### `affinity spark pod-template`")
    (usage,) = [b for b in _blocks(section, "") if b.startswith("affinity spark pod-template")]
    documented = set(re.findall(r"--[a-z-]+", usage))
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    spark = subparsers.choices["spark"]
    template = next(a for a in spark._actions if a.dest == "action").choices["pod-template"]
    options = {o for a in template._actions for o in a.option_strings if o.startswith("--")}
    assert documented == options - {"--help"}
