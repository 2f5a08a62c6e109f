"""KubernetesLocationIdProvider against a local TLS stub of the Kubernetes API server.

The official ``kubernetes`` client talks to the stub through its real in-cluster configuration
(``InClusterConfigLoader`` with our token, CA file and environment), so the TLS verification,
the bearer token and the request paths are the real ones.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from locality.kubernetes import KubernetesLocationIdProvider
from locality.providers import LocationError, get_location_provider

TOKEN = "stub-token-7f3a"
NAMESPACE = "jobs"
POD = "affinity-coordinator-5d9c7-abcde"


def _make_cert(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (its own CA) and its key, as PEM files.

    Made with the ``cryptography`` package; without it (it is not a declared test dependency
    everywhere), with the ``openssl`` command line, which every Debian machine has.
    """
    try:
        import cryptography  # noqa: F401
    except ImportError:
        return _make_cert_with_openssl(directory)
    return _make_cert_with_cryptography(directory)


def _make_cert_with_openssl(directory: Path) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("the TLS stub needs the 'cryptography' package or the 'openssl' command")
    cert_path = directory / "ca.crt"
    key_path = directory / "server.key"
    subprocess.run(
        [
            openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-days", "1", "-subj", "/CN=kube-apiserver-stub",
            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-keyout", str(key_path), "-out", str(cert_path),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert_path, key_path


def _make_cert_with_cryptography(directory: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver-stub")])
    now = datetime.datetime.now(datetime.UTC)
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), critical=False)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    cert_path = directory / "ca.crt"
    key_path = directory / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@dataclass
class ApiStub:
    """What the stub serves (path -> (status, JSON body)) and the requests it saw."""

    port: int
    cert: Path
    token_file: Path
    namespace_file: Path
    routes: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    requests: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Authorization)

    def env(self, **extra: str) -> dict[str, str]:
        return {
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(self.port),
            **extra,
        }

    def provider(self, environ: dict[str, str], **options: Any) -> KubernetesLocationIdProvider:
        return KubernetesLocationIdProvider(
            environ=environ,
            token_filename=self.token_file,
            cert_filename=self.cert,
            namespace_filename=self.namespace_file,
            timeout_s=5.0,
            **options,
        )

    def add_pod(self, name: str, node: str | None, namespace: str = NAMESPACE) -> None:
        spec: dict[str, Any] = {"containers": [{"name": "main", "image": "affinity:test"}]}
        if node is not None:
            spec["nodeName"] = node
        self.routes[f"/api/v1/namespaces/{namespace}/pods/{name}"] = (
            200,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace},
                "spec": spec,
            },
        )

    def add_node(self, name: str, labels: dict[str, str]) -> None:
        self.routes[f"/api/v1/nodes/{name}"] = (
            200,
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}},
        )

    def paths(self) -> list[str]:
        return [path for path, _ in self.requests]


def _not_found(path: str) -> dict[str, Any]:
    kind, _, name = path.rstrip("/").rpartition("/")
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'{kind.rsplit("/", 1)[-1]} "{name}" not found',
        "reason": "NotFound",
        "code": 404,
    }


@pytest.fixture(scope="module")
def server_cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return _make_cert(tmp_path_factory.mktemp("stub-tls"))


@pytest.fixture
def api(tmp_path: Path, server_cert: tuple[Path, Path]) -> Iterator[ApiStub]:
    cert, key = server_cert
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    namespace_file = tmp_path / "namespace"
    namespace_file.write_text(NAMESPACE + "\n")

    stub: ApiStub

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            stub.requests.append((path, self.headers.get("Authorization")))
            status, body = stub.routes.get(path, (404, _not_found(path)))
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    stub = ApiStub(server.server_address[1], cert, token_file, namespace_file)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


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
    other_ca, _ = _make_cert(other_dir)
    provider = KubernetesLocationIdProvider(
        environ=api.env(NODE_NAME="n1"),
        token_filename=api.token_file,
        cert_filename=other_ca,
        timeout_s=2.0,
    )
    with pytest.raises(LocationError, match="node n1"):
        provider.location_id()
    assert api.requests == []  # the handshake failed before any request was sent
