"""The Kubernetes LocationIdProvider: ``zone/node`` of the node this pod runs on.

Where the answer comes from, in order:

1. **Node name** from the Downward API environment (``AFFINITY_NODE_NAME``, then ``NODE_NAME``;
   in the pod spec: ``env: [{name: NODE_NAME, valueFrom: {fieldRef: {fieldPath:
   spec.nodeName}}}]``). Otherwise from the Kubernetes API: the pod's ``spec.nodeName``, with the
   pod name from ``AFFINITY_POD_NAME``, ``POD_NAME`` or ``HOSTNAME`` and the namespace from
   ``AFFINITY_POD_NAMESPACE``, ``POD_NAMESPACE`` or the service-account namespace file.
2. **Zone** from ``AFFINITY_ZONE`` when set (on Kubernetes 1.33+ the PodTopologyLabels admission
   plugin copies the zone label onto the pod, where the Downward API can expose it). Otherwise
   from the Kubernetes API: the node's ``topology.kubernetes.io/zone`` label, falling back to
   ``failure-domain.beta.kubernetes.io/zone``.

The result is ``zone/node``, or just ``node`` when the node has no zone label.

The API is reached with the in-cluster configuration (``KUBERNETES_SERVICE_HOST`` /
``KUBERNETES_SERVICE_PORT`` and the service-account token and CA, under
``/var/run/secrets/kubernetes.io/serviceaccount`` or the folder ``AFFINITY_SERVICE_ACCOUNT_DIR``
names, e.g. a projected token mounted elsewhere). It needs RBAC to ``get`` pods in the namespace
(only when the node name is not in the environment) and ``get`` nodes (cluster scoped: a
ClusterRole). Whether the zone is looked up (``AFFINITY_ZONE_LOOKUP``, or ``lookup_zone``):

``api``
    always: without an in-cluster configuration that is an error (an executor pod template
    written by ``affinity spark pod-template`` says so, so every executor has the same shape);
``off``
    never: the id is the node name (or ``AFFINITY_ZONE/node``), no API and no RBAC at all;
unset
    when the API is configured; when the node name comes from the environment and there is no
    in-cluster configuration at all, the id is just the node name (logged as a warning).

When the API *is* configured but a request fails (refused, timed out, RBAC 403), that is an
error, never a silently different id. :class:`~locality.base.LocationError` names everything
that was tried.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from locality.base import LocationError

__all__ = [
    "NAMESPACE_VARS",
    "NODE_NAME_VARS",
    "POD_NAME_VARS",
    "SERVICE_ACCOUNT_DIR",
    "SERVICE_ACCOUNT_DIR_VAR",
    "ZONE_LABELS",
    "ZONE_LOOKUP_MODES",
    "ZONE_LOOKUP_VAR",
    "ZONE_VARS",
    "KubernetesLocationIdProvider",
]

log = logging.getLogger(__name__)

#: Environment variables holding the node name (Downward API ``spec.nodeName``), first wins.
NODE_NAME_VARS: tuple[str, ...] = ("AFFINITY_NODE_NAME", "NODE_NAME")
#: Environment variables holding the zone, first wins.
ZONE_VARS: tuple[str, ...] = ("AFFINITY_ZONE",)
#: Environment variables holding the pod name, first wins (HOSTNAME is the pod name by default).
POD_NAME_VARS: tuple[str, ...] = ("AFFINITY_POD_NAME", "POD_NAME", "HOSTNAME")
#: Environment variables holding the pod namespace, first wins.
NAMESPACE_VARS: tuple[str, ...] = ("AFFINITY_POD_NAMESPACE", "POD_NAMESPACE")
#: Node labels naming the zone, first wins (the second is the deprecated beta label).
ZONE_LABELS: tuple[str, ...] = (
    "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/zone",
)
#: Where Kubernetes mounts the service-account token, CA and namespace.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: Environment variable naming another folder with ``token``, ``ca.crt`` and ``namespace``.
SERVICE_ACCOUNT_DIR_VAR = "AFFINITY_SERVICE_ACCOUNT_DIR"
#: Environment variable saying whether the zone is looked up: ``api`` or ``off`` (module doc).
ZONE_LOOKUP_VAR = "AFFINITY_ZONE_LOOKUP"
#: The values :data:`ZONE_LOOKUP_VAR` takes.
ZONE_LOOKUP_MODES: tuple[str, ...] = ("api", "off")


def _first(environ: Mapping[str, str], names: Sequence[str]) -> tuple[str, str] | None:
    """The first of ``names`` set to a non-blank value in ``environ``: ``(name, value)``."""
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            return name, value
    return None


class KubernetesLocationIdProvider:
    """``zone/node`` (or ``node``) of the Kubernetes node this pod runs on; see the module doc.

    Every argument is optional and exists for tests and unusual deployments:

    ``environ``
        the environment to read (default ``os.environ``, read at call time);
    ``token_filename``, ``cert_filename``, ``namespace_filename``
        the service-account files (default: in :data:`SERVICE_ACCOUNT_DIR_VAR`'s folder when
        that is set, else under :data:`SERVICE_ACCOUNT_DIR`);
    ``lookup_zone``
        ``False`` never asks the API for the zone (the id is ``node``, or ``AFFINITY_ZONE/node``);
        ``True`` asks it when the API is configured; ``None`` (the default): as
        :data:`ZONE_LOOKUP_VAR` says (``api``: must ask; ``off``: never; unset: as ``True``);
    ``zone_labels``
        node labels to try for the zone, first wins (default :data:`ZONE_LABELS`);
    ``timeout_s``
        timeout of each API request.

    The answer is cached: a pod never changes node.
    """

    def __init__(
        self,
        *,
        environ: Mapping[str, str] | None = None,
        token_filename: str | os.PathLike[str] | None = None,
        cert_filename: str | os.PathLike[str] | None = None,
        namespace_filename: str | os.PathLike[str] | None = None,
        lookup_zone: bool | None = None,
        zone_labels: Sequence[str] = ZONE_LABELS,
        timeout_s: float = 5.0,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self._environ = environ
        self._files = {
            "token": token_filename,
            "ca.crt": cert_filename,
            "namespace": namespace_filename,
        }
        self.lookup_zone = lookup_zone
        self.zone_labels = tuple(zone_labels)
        self.timeout_s = timeout_s
        self._cached: str | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"KubernetesLocationIdProvider(lookup_zone={self.lookup_zone})"

    def _file(self, name: str, environ: Mapping[str, str]) -> str:
        """The service-account file ``name`` (``token``, ``ca.crt``, ``namespace``)."""
        given = self._files[name]
        if given is not None:
            return str(given)
        folder = environ.get(SERVICE_ACCOUNT_DIR_VAR, "").strip() or SERVICE_ACCOUNT_DIR
        return str(Path(folder) / name)

    @property
    def token_filename(self) -> str:
        return self._file("token", os.environ if self._environ is None else self._environ)

    @property
    def cert_filename(self) -> str:
        return self._file("ca.crt", os.environ if self._environ is None else self._environ)

    @property
    def namespace_filename(self) -> str:
        return self._file("namespace", os.environ if self._environ is None else self._environ)

    def _zone_mode(self, environ: Mapping[str, str]) -> str:
        """``off``, ``api`` (must look up) or ``auto`` (look up if the API is configured)."""
        if self.lookup_zone is not None:
            return "auto" if self.lookup_zone else "off"
        value = environ.get(ZONE_LOOKUP_VAR, "").strip().lower()
        if not value:
            return "auto"
        if value not in ZONE_LOOKUP_MODES:
            raise LocationError(
                f"{ZONE_LOOKUP_VAR}={value!r}: must be one of {', '.join(ZONE_LOOKUP_MODES)} "
                "(or unset)"
            )
        return value

    def location_id(self) -> str:
        with self._lock:
            if self._cached is None:
                self._cached = self._resolve()
            return self._cached

    # -- resolution ---------------------------------------------------------------------------

    def _resolve(self) -> str:
        environ = os.environ if self._environ is None else self._environ
        zone_mode = self._zone_mode(environ)
        node_env = _first(environ, NODE_NAME_VARS)
        zone_env = _first(environ, ZONE_VARS)
        if node_env is not None and (zone_env is not None or zone_mode == "off"):
            return _join(zone_env[1] if zone_env else None, node_env[1])

        api, config_problem = self._api(environ)
        if api is None:
            if node_env is not None and zone_mode == "api":
                raise LocationError(
                    f"cannot read the zone of node {node_env[1]} (from {node_env[0]}): "
                    f"{ZONE_LOOKUP_VAR}=api, but the Kubernetes API is not available "
                    f"(in-cluster configuration: {config_problem}); mount the service-account "
                    f"token, or set {ZONE_LOOKUP_VAR}=off for ids without a zone"
                )
            if node_env is not None:
                log.warning(
                    "zone unknown: no in-cluster Kubernetes configuration (%s); "
                    "using the node name %r from %s alone as the location id",
                    config_problem,
                    node_env[1],
                    node_env[0],
                )
                return node_env[1]
            raise LocationError(
                "cannot find this pod's Kubernetes node: none of "
                f"{', '.join(NODE_NAME_VARS)} is set (Downward API fieldRef spec.nodeName), and "
                f"the Kubernetes API is not available (in-cluster configuration: {config_problem})"
            )
        try:
            node = node_env[1] if node_env is not None else self._node_from_pod(api, environ)
            if zone_env is not None:
                return _join(zone_env[1], node)
            zone = self._zone_of(api, node) if zone_mode != "off" else None
            return _join(zone, node)
        finally:
            api.api_client.close()

    def _api(self, environ: Mapping[str, str]) -> tuple[Any, str]:
        """A CoreV1Api with the in-cluster configuration, or ``(None, why not)``."""
        from kubernetes import client
        from kubernetes.config import incluster_config
        from kubernetes.config.config_exception import ConfigException

        configuration = client.Configuration()
        # The loader is untyped; Any keeps mypy --strict quiet without a blanket ignore.
        loader_cls: Any = incluster_config.InClusterConfigLoader
        token_filename = self._file("token", environ)
        cert_filename = self._file("ca.crt", environ)
        loader = loader_cls(
            token_filename=token_filename,
            cert_filename=cert_filename,
            try_refresh_token=False,
            environ=environ,
        )
        try:
            loader.load_and_set(configuration)
        except ConfigException as exc:
            return None, (
                f"{exc} (needs KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT, "
                f"{token_filename} and {cert_filename})"
            )
        except OSError as exc:
            return None, f"cannot read the service-account files: {exc}"
        configuration.retries = 2
        return client.CoreV1Api(client.ApiClient(configuration)), ""

    def _node_from_pod(self, api: Any, environ: Mapping[str, str]) -> str:
        pod_env = _first(environ, POD_NAME_VARS)
        if pod_env is None:
            raise LocationError(
                f"cannot find this pod's Kubernetes node: none of {', '.join(NODE_NAME_VARS)} is "
                f"set, and the pod name is unknown (none of {', '.join(POD_NAME_VARS)} is set)"
            )
        pod_name = pod_env[1]
        namespace = self._namespace(environ)
        what = f"pod {namespace}/{pod_name}"
        pod = self._call(
            api,
            what,
            lambda: api.read_namespaced_pod(pod_name, namespace, _request_timeout=self.timeout_s),
            hint=f"(pod name from {pod_env[0]}; none of {', '.join(NODE_NAME_VARS)} is set)",
        )
        spec = getattr(pod, "spec", None)
        node = getattr(spec, "node_name", None) if spec is not None else None
        if not node:
            raise LocationError(f"{what} has no spec.nodeName: it is not scheduled on a node yet")
        return str(node)

    def _namespace(self, environ: Mapping[str, str]) -> str:
        ns_env = _first(environ, NAMESPACE_VARS)
        if ns_env is not None:
            return ns_env[1]
        namespace_filename = self._file("namespace", environ)
        try:
            namespace = Path(namespace_filename).read_text().strip()
        except OSError as exc:
            raise LocationError(
                "cannot find this pod's namespace: none of "
                f"{', '.join(NAMESPACE_VARS)} is set and {namespace_filename} cannot be "
                f"read ({exc.strerror or exc})"
            ) from None
        if not namespace:
            raise LocationError(f"cannot find this pod's namespace: {namespace_filename} is empty")
        return namespace

    def _zone_of(self, api: Any, node: str) -> str | None:
        node_obj = self._call(
            api,
            f"node {node}",
            lambda: api.read_node(node, _request_timeout=self.timeout_s),
            hint=f"(reading the node's zone label; {ZONE_LOOKUP_VAR}=off skips it)",
        )
        metadata = getattr(node_obj, "metadata", None)
        labels: Mapping[str, str] = (getattr(metadata, "labels", None) or {}) if metadata else {}
        for label in self.zone_labels:
            value = str(labels.get(label, "")).strip()
            if value:
                return value
        return None

    def _call(self, api: Any, what: str, request: Any, *, hint: str) -> Any:
        """Run one API request, turning every failure into a LocationError about ``what``."""
        import urllib3
        from kubernetes.client.exceptions import ApiException

        host = f"the Kubernetes API at {api.api_client.configuration.host}"
        try:
            return request()
        except ApiException as exc:
            status = exc.status
            if status == 404:
                problem = "not found (404)"
            elif status in (401, 403):
                problem = (
                    f"access denied ({status}): the service account needs RBAC 'get' on "
                    f"{what.split(' ', 1)[0]}s"
                )
            else:
                problem = f"HTTP {status} {exc.reason or ''}".rstrip()
            raise LocationError(f"cannot read {what} from {host}: {problem} {hint}") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            reason = exc.reason if isinstance(exc, urllib3.exceptions.MaxRetryError) else exc
            raise LocationError(
                f"cannot read {what} from {host}: request failed: {reason or exc} {hint}"
            ) from None


def _join(zone: str | None, node: str) -> str:
    return f"{zone}/{node}" if zone else node
