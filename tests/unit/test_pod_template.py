"""Executor pod templates: node affinity weighted by where task state is, the node's identity
for the executor (Downward API), the state folder from the node; valid Kubernetes for every
version the chart supports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from locality.pod_template import (
    DEFAULT_CONTAINER_NAME,
    HOSTNAME_LABEL,
    STATE_VOLUME_NAME,
    NodeIdentity,
    StateVolume,
    executor_pod_template,
    node_weights,
    pod_template_yaml,
)

#: Every Kubernetes version the chart supports (Chart.yaml kubeVersion >= 1.25) that
#: kubernetes-validate has schemas for.
KUBE_VERSIONS = [f"1.{minor}" for minor in range(25, 38)]

LOCALITY = {
    **{f"Partition {i}": "zone-a/node-1" for i in range(6)},  # 6 tasks
    **{f"Partition {i}": "zone-a/node-2" for i in range(6, 9)},  # 3 tasks
    **{f"Partition {i}": "zone-b/node-3" for i in range(9, 12)},  # 3 tasks
    "Partition 12": "node-4",  # 1 task, a flat location id
}
STATE = StateVolume(local_dir="/var/lib/affinity-state")


def _terms(template: dict[str, Any]) -> list[dict[str, Any]]:
    terms: list[dict[str, Any]] = template["spec"]["affinity"]["nodeAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    return terms


def _container(template: dict[str, Any]) -> dict[str, Any]:
    (container,) = template["spec"]["containers"]
    assert isinstance(container, dict)
    return container


def test_weights_scale_with_the_tasks_whose_state_is_on_each_node() -> None:
    assert node_weights(LOCALITY) == {"node-1": 100, "node-2": 50, "node-3": 50, "node-4": 17}
    # One task among very many still gets the minimum weight, never 0.
    many = {f"t{i}": "z/big" for i in range(1000)} | {"lonely": "z/small"}
    assert node_weights(many) == {"big": 100, "small": 1}


def test_nodes_are_preferred_by_name_one_term_each_heaviest_first() -> None:
    """The executor reports spec.nodeName, so nodes are matched by name (matchFields
    metadata.name), one value per term: the API server accepts no more there."""
    assert _terms(executor_pod_template(LOCALITY)) == [
        {"weight": w, "preference": {"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}}
        for node, w in (("node-1", 100), ("node-2", 50), ("node-3", 50), ("node-4", 17))
    ]  # fmt: skip
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in str(
        executor_pod_template(LOCALITY)
    )


def test_a_label_key_groups_nodes_of_one_weight_in_one_term() -> None:
    assert _terms(executor_pod_template(LOCALITY, topology_key=HOSTNAME_LABEL)) == [
        {"weight": 100, "preference": {"matchExpressions": [
            {"key": HOSTNAME_LABEL, "operator": "In", "values": ["node-1"]}]}},
        {"weight": 50, "preference": {"matchExpressions": [
            {"key": HOSTNAME_LABEL, "operator": "In", "values": ["node-2", "node-3"]}]}},
        {"weight": 17, "preference": {"matchExpressions": [
            {"key": HOSTNAME_LABEL, "operator": "In", "values": ["node-4"]}]}},
    ]  # fmt: skip


def test_node_of_maps_location_ids_to_node_names() -> None:
    template = executor_pod_template(
        {"a": "zone-a/rack-1/host-1", "b": "zone-a/rack-1/host-1"},
        node_of=lambda location: location.split("/")[1],  # group by rack label instead
        topology_key="example.com/rack",
    )
    assert _terms(template)[0]["preference"] == {
        "matchExpressions": [{"key": "example.com/rack", "operator": "In", "values": ["rack-1"]}]
    }


def test_no_locality_gives_a_template_without_affinity() -> None:
    template = executor_pod_template({})
    assert "affinity" not in template["spec"]


def test_the_executor_learns_its_node_from_the_downward_api() -> None:
    env = {e["name"]: e for e in _container(executor_pod_template(LOCALITY))["env"]}
    assert env["AFFINITY_NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["AFFINITY_ZONE_LOOKUP"]["value"] == "api"
    # The zone is read with the service-account token: it must be mounted.
    assert executor_pod_template(LOCALITY)["spec"]["automountServiceAccountToken"] is True
    off = executor_pod_template(LOCALITY, identity=NodeIdentity(zone_lookup="off"))
    assert {e["name"]: e for e in _container(off)["env"]}["AFFINITY_ZONE_LOOKUP"]["value"] == "off"
    assert "automountServiceAccountToken" not in off["spec"]
    bare = executor_pod_template(LOCALITY, identity=None)
    assert _container(bare) == {"name": DEFAULT_CONTAINER_NAME}
    with pytest.raises(ValueError, match="zone lookup must be one of api, off"):
        NodeIdentity(zone_lookup="label")


def test_the_state_folder_comes_from_the_node_and_belongs_to_the_executor() -> None:
    template = executor_pod_template(LOCALITY, state=STATE, service_account="executors")
    spec = template["spec"]
    assert spec["serviceAccountName"] == "executors"
    (volume,) = spec["volumes"]
    assert volume == {
        "name": STATE_VOLUME_NAME,
        "hostPath": {"path": "/var/lib/affinity-state", "type": "DirectoryOrCreate"},
    }
    assert _container(template)["volumeMounts"] == [
        {"name": STATE_VOLUME_NAME, "mountPath": "/var/lib/affinity-state"}
    ]
    # The executor runs as the owner; fsGroup does not apply to hostPath, so an init container
    # (root, CHOWN and FOWNER only) hands the folder the kubelet made (root, 0755) to it.
    assert spec["securityContext"]["runAsUser"] == 185
    assert spec["securityContext"]["runAsGroup"] == 185
    assert spec["securityContext"]["runAsNonRoot"] is True
    (init,) = spec["initContainers"]
    assert init["volumeMounts"] == _container(template)["volumeMounts"]
    assert init["command"][:2] == ["sh", "-c"]
    assert 'chown 185:185 "$STATE_DIR"' in init["command"][2]
    assert 'chmod 0750 "$STATE_DIR"' in init["command"][2]
    assert init["env"] == [{"name": "STATE_DIR", "value": "/var/lib/affinity-state"}]
    context = init["securityContext"]
    assert context["runAsUser"] == 0 and context["runAsNonRoot"] is False
    assert context["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN", "FOWNER"]}
    assert context["allowPrivilegeEscalation"] is False
    assert template["metadata"]["annotations"]["affinity/state-dir"] == "/var/lib/affinity-state"


def test_the_state_folder_options() -> None:
    other = StateVolume(
        local_dir="/data/state", host_path="/mnt/disks/ssd0/affinity", uid=1000, gid=2000
    )
    spec = executor_pod_template({}, state=other)["spec"]
    assert spec["volumes"][0]["hostPath"]["path"] == "/mnt/disks/ssd0/affinity"
    assert spec["initContainers"][0]["command"][2].startswith("chown 1000:2000 ")
    assert spec["securityContext"]["fsGroup"] == 2000
    no_init = executor_pod_template({}, state=StateVolume("/data/state", init_image=None))
    assert "initContainers" not in no_init["spec"] and no_init["spec"]["volumes"]
    # "none": the user mounts a volume (a local PersistentVolume through Spark's settings);
    # the template keeps the user and fsGroup, which local volumes honour.
    mine = executor_pod_template({}, state=StateVolume("/data/state", kind="none"))
    assert "volumes" not in mine["spec"] and "initContainers" not in mine["spec"]
    assert "volumeMounts" not in _container(mine)
    assert mine["spec"]["securityContext"]["fsGroup"] == 185


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"local_dir": "relative/state"}, "state.local_dir must be an absolute path"),
        ({"local_dir": "/"}, "state.local_dir must be an absolute path below /"),
        ({"local_dir": "/s", "host_path": "var/lib"}, "host path must be an absolute path"),
        ({"local_dir": "/s", "kind": "emptyDir"}, "state volume must be one of hostPath, none"),
        ({"local_dir": "/s", "uid": 0}, "state uid must be a non-root id"),
        ({"local_dir": "/s", "gid": -1}, "state gid must be a non-root id"),
        ({"local_dir": "/s", "init_image": " "}, "image must not be empty"),
        ({"local_dir": "/s", "init_image": "busybox 1.36"}, "image must be a reference"),
        ({"local_dir": "/s", "host_path": "/etc"}, "must not be a system folder"),
        ({"local_dir": "/s", "host_path": "/etc/affinity"}, "must not be a system folder"),
        ({"local_dir": "/s", "host_path": "/var/lib"}, "must not be a system folder"),
        ({"local_dir": "/s", "host_path": "/var/lib/../../etc"}, "must be a normalized path"),
        ({"local_dir": "/s", "host_path": "/data//x"}, "must be a normalized path"),
        ({"local_dir": "/s", "host_path": "/data/x\n"}, "must be printable"),
        ({"local_dir": "/s", "host_path": "/"}, "host path must be an absolute path below /"),
    ],
)
def test_bad_state_options_are_refused_naming_the_option(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        StateVolume(**options)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"container_name": "Bad_Name!"}, "container name must be a DNS-1123 label"),
        ({"container_name": "c" * 5000}, "container name must be a DNS-1123 label"),
        ({"service_account": "Not A Name"}, "service account must be a DNS-1123 subdomain"),
        ({"labels": {"bad key!": "v"}}, "label key 'bad key!' must be"),
        ({"labels": {"Bad.Prefix/k": "v"}}, "label key prefix"),
        ({"labels": {"k": "v" * 100}}, "label value of 'k' must be at most 63"),
    ],
)
def test_names_the_api_server_would_refuse_are_refused(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        executor_pod_template(LOCALITY, **options)


def test_names_the_api_server_accepts_pass() -> None:
    template = executor_pod_template(
        LOCALITY,
        container_name="spark-kubernetes-executor",
        service_account="clicks.affinity-sa",
        labels={"example.com/team": "data_eng.1", "empty": ""},
        state=StateVolume("/s", host_path="/mnt/disks/ssd0/affinity", init_image="r.io/b:1@x"),
    )
    assert template["metadata"]["labels"]["example.com/team"] == "data_eng.1"


def test_a_location_with_an_empty_last_segment_names_no_node() -> None:
    assert node_weights({"t-1": "zone-a/", "t-2": "zone-a/node-1"}) == {"node-1": 100}


def test_the_template_is_deterministic_whatever_the_input_order() -> None:
    shuffled = dict(reversed(list(LOCALITY.items())))
    assert executor_pod_template(shuffled, state=STATE) == executor_pod_template(
        LOCALITY, state=STATE
    )


TEMPLATES = {
    "full": {"task_locality": LOCALITY, "state": STATE, "service_account": "sa"},
    "one-node": {"task_locality": {"t": "node-9"}, "state": STATE},
    "empty": {"task_locality": {}},
    "zone-off-no-init": {
        "task_locality": LOCALITY,
        "identity": NodeIdentity(zone_lookup="off"),
        "state": StateVolume("/s", init_image=None),
    },
    "local-pv": {"task_locality": LOCALITY, "state": StateVolume("/s", kind="none")},
    "by-label": {"task_locality": LOCALITY, "topology_key": HOSTNAME_LABEL, "identity": None},
}


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_the_template_is_valid_per_kubernetes_validate_strict(name: str, version: str) -> None:
    options = dict(TEMPLATES[name])
    locality = options.pop("task_locality")
    kubernetes_validate.validate(executor_pod_template(locality, **options), version, strict=True)


def test_the_yaml_passes_the_kubernetes_validate_command(tmp_path: Path) -> None:
    path = tmp_path / "executor-pod-template.yaml"
    path.write_text(pod_template_yaml(LOCALITY, state=STATE))
    assert yaml.safe_load(path.read_text()) == executor_pod_template(LOCALITY, state=STATE)
    cli = Path(sys.executable).parent / "kubernetes-validate"
    for version in (KUBE_VERSIONS[0], KUBE_VERSIONS[-1]):
        result = subprocess.run(
            [str(cli), "--strict", "-k", version, str(path)], capture_output=True, text=True
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "passed for resource pod/spark-executor" in result.stdout


def test_an_invalid_template_would_be_caught_by_the_validator() -> None:
    """The validator is not a rubber stamp: a misspelt field fails in strict mode."""
    template = executor_pod_template(LOCALITY, state=STATE)
    _terms(template)[0]["preferrence"] = _terms(template)[0].pop("preference")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(template, KUBE_VERSIONS[-1], strict=True)
    template = executor_pod_template(LOCALITY, state=STATE)
    template["spec"]["volumes"][0]["hostPath"]["kind"] = "DirectoryOrCreate"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(template, KUBE_VERSIONS[0], strict=True)
