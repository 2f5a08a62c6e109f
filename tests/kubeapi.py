"""A local TLS stub of the Kubernetes API server, for the Kubernetes location provider's tests
(unit tests in-process, and the Spark executors of ``tests/spark/test_spark_kubernetes_nodes.py``
over loopback).

The official ``kubernetes`` client talks to it through its real in-cluster configuration
(``InClusterConfigLoader`` with the stub's token, CA file and environment), so the TLS
verification, the bearer token and the request paths are the real ones. Serves
``/api/v1/namespaces/<ns>/pods/<name>`` and ``/api/v1/nodes/<name>`` from :attr:`ApiStub.routes`
(404 for anything else); :meth:`ApiStub.deny` answers 403 (RBAC) and :meth:`ApiStub.stop` takes
the server down (connections refused).
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
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from locality.kubernetes import KubernetesLocationIdProvider

__all__ = ["NAMESPACE", "POD", "TOKEN", "ApiStub", "make_cert", "serve_api"]

TOKEN = "stub-token-7f3a"
NAMESPACE = "jobs"
POD = "affinity-coordinator-5d9c7-abcde"


def make_cert(directory: Path) -> tuple[Path, Path]:
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
    server: ThreadingHTTPServer | None = None
    thread: threading.Thread | None = None

    @property
    def service_account_dir(self) -> Path:
        """The folder holding ``token``, ``ca.crt`` and ``namespace`` (as Kubernetes mounts
        them), for ``AFFINITY_SERVICE_ACCOUNT_DIR``."""
        return self.token_file.parent

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

    def deny(self, path: str) -> None:
        """Answer ``path`` with 403 Forbidden, as the API server does without RBAC for it."""
        self.routes[path] = (
            403,
            {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403},
        )

    def paths(self) -> list[str]:
        return [path for path, _ in self.requests]

    def stop(self) -> None:
        """Take the API server down: its port refuses connections from now on."""
        server, self.server = self.server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self.thread is not None:
            self.thread.join(5)


def not_found(path: str) -> dict[str, Any]:
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


@contextmanager
def serve_api(directory: Path, cert: Path, key: Path) -> Iterator[ApiStub]:
    """An :class:`ApiStub` serving HTTPS on a free loopback port with ``cert`` (its own CA);
    its service-account files (token, ``ca.crt``, namespace) in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    token_file = directory / "token"
    token_file.write_text(TOKEN)
    namespace_file = directory / "namespace"
    namespace_file.write_text(NAMESPACE + "\n")
    shutil.copyfile(cert, directory / "ca.crt")

    stub: ApiStub

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            stub.requests.append((path, self.headers.get("Authorization")))
            status, body = stub.routes.get(path, (404, not_found(path)))
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
    stub = ApiStub(server.server_address[1], directory / "ca.crt", token_file, namespace_file)
    stub.server = server
    stub.thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    stub.thread.start()
    try:
        yield stub
    finally:
        stub.stop()
