"""The chart's Spark-on-Kubernetes objects (``spark.enabled``), rendered by a real helm: the
driver's and the executors' ServiceAccounts and RBAC (the executors read their node's zone: `get`
on nodes, nothing else), the NetworkPolicies (the job's pods reach each other, DNS and the API;
the driver reaches ZooKeeper), and the driver's pod template (the coordinator's job config and
ZooKeeper Secret). Valid per kubernetes-validate --strict for every Kubernetes version the chart
supports."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from test_chart import (
    CHART,
    FULLNAME,
    NAMESPACE,
    RELEASE,
    Rendered,
    _notes,
    _values_args,
    helm,
    render,
    tmp,
)

pytestmark = pytest.mark.helm

__all__ = ["helm", "tmp"]  # fixtures, from test_chart

#: Chart.yaml: kubeVersion >= 1.25; kubernetes-validate has schemas up to 1.37.
KUBE_VERSIONS = [f"1.{minor}.0" for minor in range(25, 38)]

SPARK: dict[str, Any] = {
    "spark": {"enabled": True, "networkPolicy": {"enabled": True}},
    "config": {
        "state": {"checkpoint_dir": "/mnt/durable/clicks", "local_dir": "/var/lib/affinity-state"}
    },
}
DRIVER_SA = f"{FULLNAME}-spark-driver"
EXECUTOR_SA = f"{FULLNAME}-spark-executor"
JOB_LABELS = {"affinity-spark-job": FULLNAME}


def _render_for(helm: str, tmp: Path, version: str, values: dict[str, Any]) -> list[dict[str, Any]]:
    result = subprocess.run(
        [helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
         "--kube-version", version, *_values_args(values, tmp)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def driver_template(rendered: Rendered) -> dict[str, Any]:
    (configmap,) = [
        c for c in rendered.all("ConfigMap") if c["metadata"]["name"] == f"{FULLNAME}-spark"
    ]
    template: dict[str, Any] = yaml.safe_load(configmap["data"]["driver-pod-template.yaml"])
    return template


def _by_name(rendered: Rendered, kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in rendered.all(kind)}


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_spark_objects_are_valid_for_every_supported_kubernetes(
    helm: str, tmp: Path, version: str
) -> None:
    docs = _render_for(helm, tmp, version, SPARK)
    problems = []
    for doc in [*docs, driver_template(Rendered(docs))]:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{doc['kind']}/{doc['metadata']['name']}: {exc.message}")
    assert not problems, "\n".join(problems)


def test_lint_strict_with_spark(helm: str, tmp: Path) -> None:
    result = subprocess.run(
        [helm, "lint", "--strict", str(CHART), *_values_args(SPARK, tmp)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_off_by_default(helm: str, tmp: Path) -> None:
    rendered = render(helm, tmp)
    assert f"{FULLNAME}-spark" not in _by_name(rendered, "ConfigMap")
    assert set(_by_name(rendered, "ServiceAccount")) == {FULLNAME}
    assert set(_by_name(rendered, "NetworkPolicy")) == {FULLNAME}
    # Enabled, the job's NetworkPolicies are still opt-in (they restrict the job's egress).
    on = render(helm, tmp, {"spark": {"enabled": True}})
    assert set(_by_name(on, "NetworkPolicy")) == {FULLNAME}


def test_the_driver_runs_executors_and_the_executors_read_nodes_only(helm: str, tmp: Path) -> None:
    rendered = render(helm, tmp, SPARK)
    accounts = _by_name(rendered, "ServiceAccount")
    assert set(accounts) == {FULLNAME, DRIVER_SA, EXECUTOR_SA}
    assert accounts[DRIVER_SA]["automountServiceAccountToken"] is True
    assert accounts[EXECUTOR_SA]["automountServiceAccountToken"] is True
    (role,) = rendered.all("Role")
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["pods", "services", "configmaps", "persistentvolumeclaims"],
            "verbs": [
                "get",
                "list",
                "watch",
                "create",
                "update",
                "patch",
                "delete",
                "deletecollection",
            ],
        }
    ]
    (cluster_role,) = rendered.all("ClusterRole")
    assert cluster_role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    assert NAMESPACE in cluster_role["metadata"]["name"]
    for binding_kind, target, account in (
        ("RoleBinding", role, DRIVER_SA),
        ("ClusterRoleBinding", cluster_role, EXECUTOR_SA),
    ):
        (binding,) = rendered.all(binding_kind)
        assert binding["roleRef"]["name"] == target["metadata"]["name"]
        assert binding["roleRef"]["kind"] == target["kind"]
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
        ]
    # The coordinator itself still never calls the API.
    assert rendered.pod["serviceAccountName"] == FULLNAME
    assert rendered.pod["automountServiceAccountToken"] is False


def test_zone_lookup_off_needs_no_cluster_role_and_existing_accounts_are_bound(
    helm: str, tmp: Path
) -> None:
    rendered = render(
        helm,
        tmp,
        {
            "spark": {
                "enabled": True,
                "driver": {"serviceAccount": {"create": False, "name": "spark"}},
                "executor": {
                    "serviceAccount": {"create": False, "name": "spark-exec"},
                    "readNodes": False,
                },
            }
        },
    )
    assert set(_by_name(rendered, "ServiceAccount")) == {FULLNAME}
    assert not rendered.all("ClusterRole") and not rendered.all("ClusterRoleBinding")
    (binding,) = rendered.all("RoleBinding")
    assert binding["subjects"][0]["name"] == "spark"
    assert driver_template(rendered)["spec"]["serviceAccountName"] == "spark"


def test_network_policies_let_the_job_talk_to_itself_the_api_and_the_driver_to_zookeeper(
    helm: str, tmp: Path
) -> None:
    values = {
        **SPARK,
        "networkPolicy": {"zookeeperTo": [{"podSelector": {"matchLabels": {"app": "zookeeper"}}}]},
        "spark": {
            "enabled": True,
            "podLabels": {"team": "data", "job": "clicks"},
            "networkPolicy": {
                "enabled": True,
                "apiServer": [{"ipBlock": {"cidr": "10.0.0.1/32"}}],
                "extraEgress": [{"ports": [{"port": 9092, "protocol": "TCP"}]}],
            },
        },
    }
    policies = _by_name(render(helm, tmp, values), "NetworkPolicy")
    labels = {"team": "data", "job": "clicks"}
    job = policies[f"{FULLNAME}-spark"]["spec"]
    assert job["podSelector"] == {"matchLabels": labels}
    assert job["policyTypes"] == ["Ingress", "Egress"]
    assert job["ingress"] == [{"from": [{"podSelector": {"matchLabels": labels}}]}]
    dns, itself, api, kafka = job["egress"]
    assert {(p["port"], p["protocol"]) for p in dns["ports"]} == {(53, "UDP"), (53, "TCP")}
    assert itself == {"to": [{"podSelector": {"matchLabels": labels}}]}
    assert api == {
        "ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}],
        "to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}],
    }
    assert kafka == {"ports": [{"port": 9092, "protocol": "TCP"}]}
    driver = policies[f"{FULLNAME}-spark-driver"]["spec"]
    assert driver["podSelector"] == {"matchLabels": {**labels, "spark-role": "driver"}}
    assert driver["policyTypes"] == ["Egress"]
    assert driver["egress"] == [
        {
            "ports": [{"port": 2181, "protocol": "TCP"}, {"port": 2281, "protocol": "TCP"}],
            "to": [{"podSelector": {"matchLabels": {"app": "zookeeper"}}}],
        }
    ]


def test_the_driver_template_reads_the_coordinators_config_and_zookeeper_secret(
    helm: str, tmp: Path
) -> None:
    rendered = render(helm, tmp, SPARK)
    template = driver_template(rendered)
    assert template["metadata"]["labels"] == JOB_LABELS
    spec = template["spec"]
    assert spec["serviceAccountName"] == DRIVER_SA
    (container,) = spec["containers"]
    assert container["name"] == "spark-kubernetes-driver"
    env = {e["name"]: e for e in container["env"]}
    coordinator_env = rendered.env()
    for name in ("AFFINITY_ZK_CONNECT", "AFFINITY_ZK_AUTH"):
        assert env[name] == coordinator_env[name]  # the same Secret and keys
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    config = mounts["/etc/affinity"]
    assert config["readOnly"] is True
    assert volumes[config["name"]]["configMap"]["name"] == FULLNAME
    assert "job.yaml" in _by_name(rendered, "ConfigMap")[FULLNAME]["data"]
    tls = render(
        helm,
        tmp,
        {**SPARK, "zookeeper": {"tls": {"enabled": True, "existingSecret": "zk-tls"}}},
    )
    tls_spec = driver_template(tls)["spec"]
    assert {
        "name": "zookeeper-tls",
        "mountPath": "/etc/affinity-tls/zookeeper",
        "readOnly": True,
    } in tls_spec["containers"][0]["volumeMounts"]
    assert any(v.get("secret", {}).get("secretName") == "zk-tls" for v in tls_spec["volumes"])


def test_the_notes_give_the_steps_with_this_releases_names(helm: str, tmp: Path) -> None:
    notes = _notes(helm, tmp, SPARK)
    assert (
        f"kubectl -n {NAMESPACE} get configmap {FULLNAME}-spark -o jsonpath="
        "'{.data.driver-pod-template\\.yaml}' > driver-pod-template.yaml"
    ) in notes
    assert (
        f"kubectl -n {NAMESPACE} exec deploy/{FULLNAME} -- affinity spark pod-template --config "
        f"/etc/affinity/job.yaml --service-account {EXECUTOR_SA} --label "
        f"affinity-spark-job={FULLNAME} > executor-pod-template.yaml"
    ) in notes
    for conf in (
        f"spark.kubernetes.authenticate.driver.serviceAccountName={DRIVER_SA}",
        f"spark.kubernetes.authenticate.executor.serviceAccountName={EXECUTOR_SA}",
        "spark.kubernetes.driver.podTemplateFile=driver-pod-template.yaml",
        "spark.kubernetes.executor.podTemplateFile=executor-pod-template.yaml",
        "spark.kubernetes.executor.volumes.persistentVolumeClaim.checkpoints.mount.path="
        "/mnt/durable/clicks",
    ):
        assert f"--conf {conf}" in notes, conf
    assert "WARNING" not in notes
    no_local_dir = _notes(helm, tmp, {"spark": {"enabled": True}})
    assert "WARNING: config.state.local_dir is empty" in no_local_dir
    assert "spark-submit" not in _notes(helm, tmp)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"spark": {"enabled": "yes"}}, "spark.enabled"),
        ({"spark": {"podLabels": {"bad key!": "x"}}}, "spark.podLabels"),
        ({"spark": {"executor": {"readNode": True}}}, "readNode"),
        (
            {"spark": {"networkPolicy": {"apiServerPorts": []}}},
            "spark.networkPolicy.apiServerPorts",
        ),
    ],
)
def test_bad_spark_values_are_rejected_naming_the_key(
    helm: str, tmp: Path, values: dict[str, Any], message: str
) -> None:
    result = subprocess.run(
        [helm, "template", RELEASE, str(CHART), *_values_args(values, tmp)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
