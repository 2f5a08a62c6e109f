"""KubernetesLocationIdProvider against a local TLS stub of the Kubernetes API server
(``tests/kubeapi.py``): the real ``kubernetes`` client, in-cluster configuration, TLS and
bearer token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubeapi import NAMESPACE, POD, TOKEN, ApiStub, make_cert, serve_api

from locality.kubernetes import KubernetesLocationIdProvider
from locality.providers import LocationError, get_location_provider
from locality.spark import provider as provider_module
from locality.spark.provider import SparkExecutorLocationIdProvider, on_kubernetes


@pytest.fixture(scope="module")
def server_cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_cert(tmp_path_factory.mktemp("stub-tls"))


@pytest.fixture
def api(tmp_path: Path, server_cert: tuple[Path, Path]) -> Iterator[ApiStub]:
    cert, key = server_cert
    with serve_api(tmp_path / "serviceaccount", cert, key) as stub:
        yield stub


# -- Downward API environment first ------------------------------------------------------------


def test_node_name_from_environment_skips_the_pod_lookup(api: ApiStub) -> None:
    api.add_node("node-7", {"topology.kubernetes.io/zone": "eu-west-1b"})
    api.add_pod(POD, "some-other-node")  # must not be consulted
    provider = api.provider(api.env(NODE_NAME="node-7", HOSTNAME=POD))
    assert provider.location_id() == "eu-west-1b/node-7"
    assert api.paths() == ["/api/v1/nodes/node-7"]


def test_affinity_node_name_wins_over_node_name(api: ApiStub) -> None:
    api.add_node("node-a", {})
    provider = api.provider(api.env(AFFINITY_NODE_NAME="node-a", NODE_NAME="node-b"))
    assert provider.location_id() == "node-a"
    assert api.paths() == ["/api/v1/nodes/node-a"]


def test_node_and_zone_from_environment_need_no_api(api: ApiStub) -> None:
    provider = api.provider(api.env(NODE_NAME="node-7", AFFINITY_ZONE="zone-x"))
    assert provider.location_id() == "zone-x/node-7"
    assert api.requests == []


def test_node_from_environment_without_in_cluster_config_is_just_the_node(tmp_path: Path) -> None:
    provider = KubernetesLocationIdProvider(
        environ={"NODE_NAME": "node-7"},
        token_filename=tmp_path / "missing-token",
        cert_filename=tmp_path / "missing-ca.crt",
    )
    assert provider.location_id() == "node-7"


def test_lookup_zone_false_never_calls_the_api(api: ApiStub) -> None:
    api.add_node("node-7", {"topology.kubernetes.io/zone": "z"})
    provider = api.provider(api.env(NODE_NAME="node-7"), lookup_zone=False)
    assert provider.location_id() == "node-7"
    assert api.requests == []


# -- the API path ------------------------------------------------------------------------------


def test_api_path_with_zone_label(api: ApiStub) -> None:
    api.add_pod(POD, "ip-10-0-1-17")
    api.add_node(
        "ip-10-0-1-17",
        {"topology.kubernetes.io/zone": "us-east-1a", "kubernetes.io/hostname": "ip-10-0-1-17"},
    )
    provider = api.provider(api.env(HOSTNAME=POD, POD_NAMESPACE=NAMESPACE))
    assert provider.location_id() == "us-east-1a/ip-10-0-1-17"
    assert api.paths() == [
        f"/api/v1/namespaces/{NAMESPACE}/pods/{POD}",
        "/api/v1/nodes/ip-10-0-1-17",
    ]


def test_api_request_carries_the_service_account_bearer_token(api: ApiStub) -> None:
    api.add_pod(POD, "n1")
    api.add_node("n1", {})
    api.provider(api.env(POD_NAME=POD)).location_id()
    assert len(api.requests) == 2
    for path, authorization in api.requests:
        assert authorization is not None, f"{path} was sent without an Authorization header"
        scheme, _, token = authorization.partition(" ")
        assert scheme.lower() == "bearer"
        assert token == TOKEN


def test_api_path_without_zone_label_is_just_the_node(api: ApiStub) -> None:
    api.add_pod(POD, "n1")
    api.add_node("n1", {"kubernetes.io/hostname": "n1"})
    assert api.provider(api.env(POD_NAME=POD)).location_id() == "n1"


def test_legacy_zone_label_is_the_fallback(api: ApiStub) -> None:
    api.add_pod(POD, "n1")
    api.add_node("n1", {"failure-domain.beta.kubernetes.io/zone": "old-zone"})
    assert api.provider(api.env(POD_NAME=POD)).location_id() == "old-zone/n1"


def test_new_zone_label_wins_over_legacy(api: ApiStub) -> None:
    api.add_pod(POD, "n1")
    api.add_node(
        "n1",
        {
            "failure-domain.beta.kubernetes.io/zone": "old-zone",
            "topology.kubernetes.io/zone": "new-zone",
        },
    )
    assert api.provider(api.env(POD_NAME=POD)).location_id() == "new-zone/n1"


def test_namespace_comes_from_the_service_account_file(api: ApiStub) -> None:
    api.add_pod(POD, "n1")  # in NAMESPACE, which only the file names
    api.add_node("n1", {})
    assert api.provider(api.env(HOSTNAME=POD)).location_id() == "n1"
    assert api.paths()[0] == f"/api/v1/namespaces/{NAMESPACE}/pods/{POD}"


def test_pod_name_variable_wins_over_hostname(api: ApiStub) -> None:
    api.add_pod("real-pod", "n1")
    api.add_node("n1", {})
    provider = api.provider(api.env(POD_NAME="real-pod", HOSTNAME="container-hostname"))
    assert provider.location_id() == "n1"


def test_answer_is_cached(api: ApiStub) -> None:
    api.add_pod(POD, "n1")
    api.add_node("n1", {})
    provider = api.provider(api.env(POD_NAME=POD))
    assert provider.location_id() == provider.location_id() == "n1"
    assert len(api.requests) == 2


def test_get_location_provider_builds_the_kubernetes_provider(api: ApiStub) -> None:
    api.add_node("n9", {"topology.kubernetes.io/zone": "z9"})
    provider = get_location_provider(
        "kubernetes",
        environ=api.env(NODE_NAME="n9"),
        token_filename=api.token_file,
        cert_filename=api.cert,
    )
    assert isinstance(provider, KubernetesLocationIdProvider)
    assert provider.location_id() == "z9/n9"


# -- clear errors ------------------------------------------------------------------------------


def test_missing_pod_is_a_clear_error(api: ApiStub) -> None:
    provider = api.provider(api.env(POD_NAME="ghost", POD_NAMESPACE="jobs"))
    with pytest.raises(LocationError) as info:
        provider.location_id()
    message = str(info.value)
    assert "pod jobs/ghost" in message
    assert "not found (404)" in message
    assert "NODE_NAME" in message  # says what else it would have used
    assert api.paths() == ["/api/v1/namespaces/jobs/pods/ghost"]


def test_unscheduled_pod_is_a_clear_error(api: ApiStub) -> None:
    api.add_pod(POD, None)
    with pytest.raises(LocationError, match=r"no spec\.nodeName"):
        api.provider(api.env(POD_NAME=POD)).location_id()


def test_forbidden_node_read_names_rbac(api: ApiStub) -> None:
    api.routes["/api/v1/nodes/n1"] = (
        403,
        {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403},
    )
    with pytest.raises(LocationError) as info:
        api.provider(api.env(NODE_NAME="n1")).location_id()
    assert "node n1" in str(info.value)
    assert "RBAC 'get' on nodes" in str(info.value)


def test_no_environment_and_no_in_cluster_config_is_a_clear_error(tmp_path: Path) -> None:
    provider = KubernetesLocationIdProvider(
        environ={"HOSTNAME": POD},
        token_filename=tmp_path / "token",
        cert_filename=tmp_path / "ca.crt",
    )
    with pytest.raises(LocationError) as info:
        provider.location_id()
    message = str(info.value)
    for tried in ("AFFINITY_NODE_NAME", "NODE_NAME", "KUBERNETES_SERVICE_HOST", "in-cluster"):
        assert tried in message


def test_in_cluster_env_without_token_file_is_a_clear_error(api: ApiStub, tmp_path: Path) -> None:
    provider = KubernetesLocationIdProvider(
        environ=api.env(POD_NAME=POD),
        token_filename=tmp_path / "no-such-token",
        cert_filename=api.cert,
    )
    with pytest.raises(LocationError, match="token file does not exist"):
        provider.location_id()
    assert api.requests == []


def test_no_pod_name_is_a_clear_error(api: ApiStub) -> None:
    with pytest.raises(LocationError, match="POD_NAME, HOSTNAME"):
        api.provider(api.env()).location_id()


def test_no_namespace_is_a_clear_error(api: ApiStub, tmp_path: Path) -> None:
    provider = KubernetesLocationIdProvider(
        environ=api.env(POD_NAME=POD),
        token_filename=api.token_file,
        cert_filename=api.cert,
        namespace_filename=tmp_path / "no-namespace",
    )
    with pytest.raises(LocationError, match="POD_NAMESPACE"):
        provider.location_id()


def test_untrusted_server_certificate_is_an_error(api: ApiStub, tmp_path: Path) -> None:
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    other_ca, _ = make_cert(other_dir)
    provider = KubernetesLocationIdProvider(
        environ=api.env(NODE_NAME="n1"),
        token_filename=api.token_file,
        cert_filename=other_ca,
        timeout_s=2.0,
    )
    with pytest.raises(LocationError, match="node n1"):
        provider.location_id()
    assert api.requests == []  # the handshake failed before any request was sent


# -- a Spark executor on Kubernetes: SparkExecutorLocationIdProvider -------------------------
# What an executor pod's environment holds: the Downward API node name the executor pod template
# gives it (AFFINITY_NODE_NAME), AFFINITY_ZONE_LOOKUP, Spark's SPARK_EXECUTOR_POD_NAME/_IP, and
# the in-cluster API variables. The provider must answer zone/node of the node, never the pod's
# address, and fail clearly otherwise.


def _executor_env(api: ApiStub, **extra: str) -> dict[str, str]:
    return api.env(
        **{
            "AFFINITY_SERVICE_ACCOUNT_DIR": str(api.service_account_dir),
            "SPARK_EXECUTOR_POD_NAME": "clicks-exec-3",
            "SPARK_EXECUTOR_POD_IP": "10.42.7.19",
            "SPARK_LOCAL_IP": "10.42.7.19",
            "SPARK_LOCAL_DIRS": str(api.service_account_dir.parent / "spark-local"),
            **extra,
        }
    )


def _executor(environ: dict[str, str]) -> SparkExecutorLocationIdProvider:
    # proc: no executor JVM above the test process (its host would be the pod address)
    return SparkExecutorLocationIdProvider(environ=environ, proc=Path("/nonexistent"))


def test_executor_on_kubernetes_is_at_zone_and_node_of_its_pods_node(api: ApiStub) -> None:
    api.add_node("node-exec-1", {"topology.kubernetes.io/zone": "eu-west-1a"})
    env = _executor_env(api, AFFINITY_NODE_NAME="node-exec-1", AFFINITY_ZONE_LOOKUP="api")
    assert _executor(env).location_id() == "eu-west-1a/node-exec-1"
    # The token from the service-account folder the environment names, over TLS.
    assert api.requests == [("/api/v1/nodes/node-exec-1", f"bearer {TOKEN}")]
    # Every task asks; the process keeps the answer (a pod never changes node).
    assert _executor(dict(env)).location_id() == "eu-west-1a/node-exec-1"
    assert len(api.requests) == 1


def test_new_python_workers_of_the_pod_need_no_api(api: ApiStub, tmp_path: Path) -> None:
    """Spark forks new Python workers; each asks for its location. The first answer is kept in
    the pod's local dir, so the others need no request, also while the API server is down."""
    api.add_node("node-exec-8", {"topology.kubernetes.io/zone": "z8"})
    env = _executor_env(api, AFFINITY_NODE_NAME="node-exec-8", AFFINITY_ZONE_LOOKUP="api")
    assert _executor(env).location_id() == "z8/node-exec-8"
    api.stop()
    provider_module._k8s_ids.clear()  # a new Python worker: nothing in its memory
    assert _executor(env).location_id() == "z8/node-exec-8"
    assert len(api.requests) == 1
    # Another pod (its own local dir) has no answer kept: it must ask, and cannot.
    other_pod = {**env, "SPARK_LOCAL_DIRS": str(tmp_path / "other-pod")}
    provider_module._k8s_ids.clear()
    with pytest.raises(LocationError, match="request failed"):
        _executor(other_pod).location_id()


def test_executor_node_without_zone_label_is_the_node(api: ApiStub) -> None:
    api.add_node("node-exec-2", {"kubernetes.io/hostname": "node-exec-2"})
    env = _executor_env(api, AFFINITY_NODE_NAME="node-exec-2", AFFINITY_ZONE_LOOKUP="api")
    assert _executor(env).location_id() == "node-exec-2"


def test_executor_without_the_downward_api_finds_its_node_through_its_pod(api: ApiStub) -> None:
    api.add_pod("clicks-exec-3", "node-exec-3")
    api.add_node("node-exec-3", {"topology.kubernetes.io/zone": "z3"})
    env = _executor_env(api, HOSTNAME="clicks-exec-3-truncated")  # Spark's hostname differs
    assert _executor(env).location_id() == "z3/node-exec-3"
    assert api.paths() == [
        f"/api/v1/namespaces/{NAMESPACE}/pods/clicks-exec-3",
        "/api/v1/nodes/node-exec-3",
    ]


def test_executor_zone_lookup_off_needs_no_api(api: ApiStub) -> None:
    env = _executor_env(api, AFFINITY_NODE_NAME="node-exec-4", AFFINITY_ZONE_LOOKUP="off")
    assert _executor(env).location_id() == "node-exec-4"
    assert api.requests == []


def test_executor_rbac_denied_is_a_clear_error_not_the_pod_address(api: ApiStub) -> None:
    api.deny("/api/v1/nodes/node-exec-5")
    env = _executor_env(api, AFFINITY_NODE_NAME="node-exec-5", AFFINITY_ZONE_LOOKUP="api")
    with pytest.raises(LocationError) as info:
        _executor(env).location_id()
    message = str(info.value)
    assert message.startswith("this Spark executor's Kubernetes node: cannot read node node-exec-5")
    assert "access denied (403)" in message and "RBAC 'get' on nodes" in message
    assert "AFFINITY_ZONE_LOOKUP=off" in message  # the way out without RBAC
    assert "10.42.7.19" not in message


def test_executor_api_down_is_a_clear_error_not_the_pod_address(api: ApiStub) -> None:
    env = _executor_env(api, AFFINITY_NODE_NAME="node-exec-6", AFFINITY_ZONE_LOOKUP="api")
    api.stop()  # the API server is down: its port refuses connections
    with pytest.raises(LocationError) as info:
        _executor(env).location_id()
    message = str(info.value)
    assert "cannot read node node-exec-6 from the Kubernetes API at https://127.0.0.1:" in message
    assert "request failed" in message
    # Not remembered: the next task asks again (and succeeds once the API is back).
    with pytest.raises(LocationError):
        _executor(env).location_id()


def test_executor_zone_lookup_api_without_a_token_is_a_clear_error(
    api: ApiStub, tmp_path: Path
) -> None:
    env = _executor_env(
        api,
        AFFINITY_NODE_NAME="node-exec-7",
        AFFINITY_ZONE_LOOKUP="api",
        AFFINITY_SERVICE_ACCOUNT_DIR=str(tmp_path / "no-token-mounted"),
    )
    with pytest.raises(LocationError) as info:
        _executor(env).location_id()
    message = str(info.value)
    assert "cannot read the zone of node node-exec-7" in message
    assert "AFFINITY_ZONE_LOOKUP=api" in message and "token" in message
    assert api.requests == []
    # Unset (a processor's default), the same environment gives the node alone.
    del env["AFFINITY_ZONE_LOOKUP"]
    assert _executor(env).location_id() == "node-exec-7"


def test_executor_bad_zone_lookup_value_is_named(api: ApiStub) -> None:
    env = _executor_env(api, AFFINITY_NODE_NAME="n8", AFFINITY_ZONE_LOOKUP="label")
    with pytest.raises(
        LocationError, match="AFFINITY_ZONE_LOOKUP='label': must be one of api, off"
    ):
        _executor(env).location_id()


def test_affinity_location_id_still_wins_and_outside_kubernetes_the_host_answers(
    api: ApiStub,
) -> None:
    env = _executor_env(api, AFFINITY_NODE_NAME="n9", AFFINITY_LOCATION_ID="zone-x/rack-1/n9")
    assert _executor(env).location_id() == "zone-x/rack-1/n9"
    assert not on_kubernetes({"SPARK_LOCAL_IP": "127.0.0.2"})
    standalone = SparkExecutorLocationIdProvider(
        environ={"SPARK_LOCAL_IP": "127.0.0.2"}, proc=Path("/nonexistent")
    )
    assert standalone.location_id() == "127.0.0.2"
    assert api.requests == []
