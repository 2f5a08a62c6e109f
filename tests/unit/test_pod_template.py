"""Executor pod templates: node affinity weighted by where task state is; valid Kubernetes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from locality.pod_template import (
    DEFAULT_CONTAINER_NAME,
    executor_pod_template,
    node_weights,
    pod_template_yaml,
)

KUBE_VERSION = "1.30"

LOCALITY = {
    **{f"Partition {i}": "zone-a/node-1" for i in range(6)},  # 6 tasks
    **{f"Partition {i}": "zone-a/node-2" for i in range(6, 9)},  # 3 tasks
    **{f"Partition {i}": "zone-b/node-3" for i in range(9, 12)},  # 3 tasks
    "Partition 12": "node-4",  # 1 task, a flat location id
}


def _terms(template: dict[str, object]) -> list[dict[str, object]]:
    spec = template["spec"]
    assert isinstance(spec, dict)
    terms: list[dict[str, object]] = spec["affinity"]["nodeAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    return terms


def test_weights_scale_with_the_tasks_whose_state_is_on_each_node() -> None:
    assert node_weights(LOCALITY) == {"node-1": 100, "node-2": 50, "node-3": 50, "node-4": 17}
    # One task among very many still gets the minimum weight, never 0.
    many = {f"t{i}": "z/big" for i in range(1000)} | {"lonely": "z/small"}
    assert node_weights(many) == {"big": 100, "small": 1}


def test_the_template_prefers_the_nodes_by_weight_one_term_per_weight() -> None:
    template = executor_pod_template(LOCALITY)
    assert template["apiVersion"] == "v1" and template["kind"] == "Pod"
    assert template["spec"]["containers"] == [{"name": DEFAULT_CONTAINER_NAME}]
    assert _terms(template) == [
        {"weight": 100, "preference": {"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-1"]}]}},
        {"weight": 50, "preference": {"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-2", "node-3"]}]}},
        {"weight": 17, "preference": {"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-4"]}]}},
    ]  # fmt: skip
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in str(template)


def test_node_of_maps_location_ids_to_node_names() -> None:
    template = executor_pod_template(
        {"a": "zone-a/rack-1/host-1", "b": "zone-a/rack-1/host-1"},
        node_of=lambda location: location.split("/")[1],  # group by rack label instead
    )
    assert _terms(template)[0]["preference"] == {
        "matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["rack-1"]}
        ]
    }


def test_no_locality_gives_a_template_without_affinity() -> None:
    template = executor_pod_template({})
    assert "affinity" not in template["spec"]
    kubernetes_validate.validate(template, KUBE_VERSION, strict=True)


def test_the_template_is_deterministic_whatever_the_input_order() -> None:
    shuffled = dict(reversed(list(LOCALITY.items())))
    assert executor_pod_template(shuffled) == executor_pod_template(LOCALITY)


@pytest.mark.parametrize("locality", [LOCALITY, {"t": "node-9"}, {}])
def test_the_template_is_valid_per_kubernetes_validate_strict(
    locality: dict[str, str], tmp_path: Path
) -> None:
    kubernetes_validate.validate(executor_pod_template(locality), KUBE_VERSION, strict=True)
    path = tmp_path / "executor-pod-template.yaml"
    path.write_text(pod_template_yaml(locality))
    assert yaml.safe_load(path.read_text()) == executor_pod_template(locality)
    cli = Path(sys.executable).parent / "kubernetes-validate"
    result = subprocess.run(
        [str(cli), "--strict", "-k", KUBE_VERSION, str(path)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "passed for resource pod/spark-executor" in result.stdout


def test_an_invalid_weight_would_be_caught_by_the_validator() -> None:
    """The validator is not a rubber stamp: a misspelt field fails in strict mode."""
    template = executor_pod_template(LOCALITY)
    _terms(template)[0]["preferrence"] = _terms(template)[0].pop("preference")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(template, KUBE_VERSION, strict=True)
