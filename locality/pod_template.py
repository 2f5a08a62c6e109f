"""Kubernetes executor pod templates: executors steered to the nodes holding task state, told
which node they are on, and given a directory on that node for the state.

Spark on Kubernetes builds each executor pod from ``spark.kubernetes.executor.podTemplateFile``.
:func:`executor_pod_template` writes that template with three parts:

**Node affinity.** A *preferred* node affinity
(``preferredDuringSchedulingIgnoredDuringExecution``): every node where some task last ran gets
a weight from 1 to 100, scaled by the number of tasks whose state is there (the node with the
most tasks gets 100). The scheduler adds the weight of every term a node matches, so executors
go to the nodes with the most state first, and still start anywhere when those nodes are full or
gone (the affinity is preferred, never required). Location ids are hierarchical (``zone/node``);
the node is the last component unless ``node_of`` says otherwise, and it is the node's *name*
(the executor reports ``spec.nodeName``), matched exactly with ``matchFields: metadata.name``
(one node per term: the API server accepts one value there); with ``topology_key`` a node label
is matched instead (``kubernetes.io/hostname``, or a rack label with ``node_of``).

**The node's identity** (:class:`NodeIdentity`). The executor container gets
``AFFINITY_NODE_NAME`` from the Downward API (``fieldRef: spec.nodeName``) and
``AFFINITY_ZONE_LOOKUP`` (``api``: the zone from the node's label, read with the executor's
service-account token, so ``get`` on nodes; ``off``: ids are the node name alone, no API and no
RBAC). The executor side (``locality.spark.provider.SparkExecutorLocationIdProvider``) then
answers ``zone/node`` of that node, whatever the pod's address.

**State on the node** (:class:`StateVolume`). ``state.local_dir`` is mounted from the node: a
``hostPath`` with ``type: DirectoryOrCreate`` (the default), shared by every executor pod on the
node and outliving them, so a replacement executor on that node opens what its predecessor
left. The kubelet creates a missing directory as root with mode 0755, and ``fsGroup`` does not
apply to ``hostPath`` volumes, so an init container (root, only the ``CHOWN`` and ``FOWNER``
capabilities) hands the directory to the executor's user and group (mode 0750) before the
executor starts; the pod runs as that user (``runAsUser``/``runAsGroup``, and ``fsGroup`` for a
volume that honours it). ``kind="none"`` mounts nothing (mount a local PersistentVolume at
``local_dir`` through Spark's ``spark.kubernetes.executor.volumes.persistentVolumeClaim.*``
settings, see ``docs/spark.md``) but keeps the user and ``fsGroup``, which local volumes honour.

Every name the API server checks (container, ServiceAccount, labels, image, the node folder:
:mod:`locality.kubernetes_names`) is checked here, a ValueError naming it.

May import ``metadata.model`` only; never ``groupers`` or ``coordinator``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from locality.kubernetes_names import (
    container_name_problem,
    host_path_problem,
    image_problem,
    label_problem,
    service_account_problem,
)

__all__ = [
    "DEFAULT_CONTAINER_NAME",
    "DEFAULT_HOST_PATH",
    "DEFAULT_INIT_IMAGE",
    "HOSTNAME_LABEL",
    "NODE_NAME_FIELD",
    "STATE_VOLUME_KINDS",
    "STATE_VOLUME_NAME",
    "ZONE_LOOKUPS",
    "NodeIdentity",
    "StateVolume",
    "executor_pod_template",
    "node_weights",
    "pod_template_yaml",
]

#: The executor container Spark looks for (``spark.kubernetes.executor.podTemplateContainerName``).
DEFAULT_CONTAINER_NAME = "spark-kubernetes-executor"
#: The well-known node label holding the node's host name.
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: The node field ``matchFields`` matches: the node's name, what ``spec.nodeName`` holds.
NODE_NAME_FIELD = "metadata.name"
#: The pod volume holding the state (not ``spark-local-dir-*``: Spark owns those names).
STATE_VOLUME_NAME = "affinity-state"
#: Where on the node the state lives by default.
DEFAULT_HOST_PATH = "/var/lib/affinity-state"
#: The init container's image (it needs ``sh``, ``chown`` and ``chmod``).
DEFAULT_INIT_IMAGE = "busybox:1.36"
#: ``StateVolume.kind`` values.
STATE_VOLUME_KINDS: tuple[str, ...] = ("hostPath", "none")
#: ``NodeIdentity.zone_lookup`` values (``AFFINITY_ZONE_LOOKUP`` on the executor).
ZONE_LOOKUPS: tuple[str, ...] = ("api", "off")
MAX_WEIGHT = 100


@dataclass(frozen=True)
class NodeIdentity:
    """What the executor is told about its node: the Downward API node name, and whether the
    zone is read from the node's label (``api``) or left out (``off``)."""

    zone_lookup: str = "api"

    def __post_init__(self) -> None:
        if self.zone_lookup not in ZONE_LOOKUPS:
            raise ValueError(
                f"zone lookup must be one of {', '.join(ZONE_LOOKUPS)}, got {self.zone_lookup!r}"
            )

    def env(self) -> list[dict[str, Any]]:
        return [
            {
                "name": "AFFINITY_NODE_NAME",
                "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
            },
            {"name": "AFFINITY_ZONE_LOOKUP", "value": self.zone_lookup},
        ]


@dataclass(frozen=True)
class StateVolume:
    """Where the executor's state directory (``local_dir``, the job config's
    ``state.local_dir``) comes from on the node, and who owns it (module docstring)."""

    local_dir: str
    kind: str = "hostPath"
    host_path: str = DEFAULT_HOST_PATH
    uid: int = 185  # the user of Apache Spark's images
    gid: int = 185
    init_image: str | None = DEFAULT_INIT_IMAGE  # None: the directory is prepared otherwise

    def __post_init__(self) -> None:
        local = self.local_dir
        if not local.startswith("/") or local.rstrip("/") == "" or not local.isprintable():
            raise ValueError(f"state.local_dir must be an absolute path below /, got {local!r}")
        problem = host_path_problem("host path", self.host_path)
        if problem is not None:
            raise ValueError(problem)
        if self.kind not in STATE_VOLUME_KINDS:
            raise ValueError(
                f"state volume must be one of {', '.join(STATE_VOLUME_KINDS)}, got {self.kind!r}"
            )
        for what, value in (("uid", self.uid), ("gid", self.gid)):
            if not 0 < value < 2**31:
                raise ValueError(
                    f"state {what} must be a non-root id (1 to 2147483647), got {value}"
                )
        if self.init_image is not None and not self.init_image.strip():
            raise ValueError(
                "the init container's image must not be empty (None: no init container)"
            )
        problem = image_problem(self.init_image) if self.init_image is not None else None
        if problem is not None:
            raise ValueError(f"the init container's {problem}")

    def security_context(self) -> dict[str, Any]:
        return {
            "runAsUser": self.uid,
            "runAsGroup": self.gid,
            "runAsNonRoot": True,
            "fsGroup": self.gid,
            "fsGroupChangePolicy": "OnRootMismatch",
        }

    def mount(self) -> dict[str, Any]:
        return {"name": STATE_VOLUME_NAME, "mountPath": self.local_dir}

    def volume(self) -> dict[str, Any]:
        return {
            "name": STATE_VOLUME_NAME,
            "hostPath": {"path": self.host_path, "type": "DirectoryOrCreate"},
        }

    def init_container(self) -> dict[str, Any]:
        owner = f"{self.uid}:{self.gid}"
        return {
            "name": "affinity-state-owner",
            "image": self.init_image,
            "command": ["sh", "-c", f'chown {owner} "$STATE_DIR" && chmod 0750 "$STATE_DIR"'],
            "env": [{"name": "STATE_DIR", "value": self.local_dir}],
            "securityContext": {
                "runAsUser": 0,
                "runAsGroup": 0,
                "runAsNonRoot": False,
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"], "add": ["CHOWN", "FOWNER"]},
            },
            "resources": {
                "requests": {"cpu": "10m", "memory": "16Mi"},
                "limits": {"cpu": "100m", "memory": "32Mi"},
            },
            "volumeMounts": [self.mount()],
        }


def _last_component(location_id: str) -> str:
    """The node of ``zone/node`` (empty for ``zone-a/``: no node named ``zone-a``)."""
    return location_id.rsplit("/", 1)[-1]


def node_weights(
    task_locality: Mapping[str, str], *, node_of: Callable[[str], str] | None = None
) -> dict[str, int]:
    """Node -> weight in 1..100: ``round(100 * tasks / most_tasks)``, at least 1 (the node with
    the most tasks gets 100). Locations that map to an empty node name are ignored."""
    to_node = node_of or _last_component
    counts = Counter(node for node in map(to_node, task_locality.values()) if node)
    if not counts:
        return {}
    most = max(counts.values())
    return {
        node: max(1, min(MAX_WEIGHT, round(MAX_WEIGHT * count / most)))
        for node, count in sorted(counts.items())
    }


def _affinity_terms(weights: Mapping[str, int], topology_key: str | None) -> list[dict[str, Any]]:
    """Preference terms, heaviest first: one per node by name, or one per weight by label."""
    if topology_key is None:
        return [
            {
                "weight": weight,
                "preference": {
                    "matchFields": [{"key": NODE_NAME_FIELD, "operator": "In", "values": [node]}]
                },
            }
            for node, weight in sorted(weights.items(), key=lambda item: (-item[1], item[0]))
        ]
    by_weight: dict[int, list[str]] = {}
    for node, weight in weights.items():
        by_weight.setdefault(weight, []).append(node)
    return [
        {
            "weight": weight,
            "preference": {
                "matchExpressions": [
                    {"key": topology_key, "operator": "In", "values": sorted(nodes)}
                ]
            },
        }
        for weight, nodes in sorted(by_weight.items(), key=lambda item: (-item[0], item[1]))
    ]


def executor_pod_template(
    task_locality: Mapping[str, str],
    *,
    node_of: Callable[[str], str] | None = None,
    topology_key: str | None = None,
    container_name: str = DEFAULT_CONTAINER_NAME,
    labels: Mapping[str, str] | None = None,
    name: str = "spark-executor",
    identity: NodeIdentity | None = NodeIdentity(),
    state: StateVolume | None = None,
    service_account: str | None = None,
) -> dict[str, Any]:
    """A Pod manifest for ``spark.kubernetes.executor.podTemplateFile`` (module docstring).

    ``task_locality`` maps task name -> location id (``zone/node``) where its state is, as
    ``ZkMetadataStore.locality.read()`` returns it; with no locality the template has no
    affinity. ``identity`` (None: none) is the node env; ``state`` (None: none) the state
    directory; ``service_account`` the executors' ServiceAccount (the one allowed to ``get``
    nodes when the zone is looked up). ``name`` is a placeholder (Spark names each executor pod
    itself); tools that list manifests want one.
    """
    _check_names(container_name, service_account, labels or {})
    weights = node_weights(task_locality, node_of=node_of)
    container: dict[str, Any] = {"name": container_name}
    spec: dict[str, Any] = {"containers": [container]}
    if identity is not None:
        container["env"] = identity.env()
        if identity.zone_lookup == "api":
            spec["automountServiceAccountToken"] = True  # the zone is read with its token
    if service_account:
        spec["serviceAccountName"] = service_account
    if state is not None:
        spec["securityContext"] = state.security_context()
        if state.kind == "hostPath":
            container["volumeMounts"] = [state.mount()]
            spec["volumes"] = [state.volume()]
            if state.init_image is not None:
                spec["initContainers"] = [state.init_container()]
    terms = _affinity_terms(weights, topology_key)
    if terms:
        spec["affinity"] = {
            "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": terms}
        }
    annotations = {
        "affinity/tasks-with-locality": str(len(task_locality)),
        "affinity/preferred-nodes": str(len(weights)),
    }
    if state is not None:
        annotations["affinity/state-dir"] = state.local_dir
    metadata: dict[str, Any] = {
        "name": name,
        "labels": {
            "app.kubernetes.io/managed-by": "affinity",
            "app.kubernetes.io/component": "spark-executor",
            **(labels or {}),
        },
        "annotations": annotations,
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _check_names(container: str, account: str | None, labels: Mapping[str, str]) -> None:
    """ValueError naming the first value the API server would refuse."""
    problems = [container_name_problem(container)]
    if account:
        problems.append(service_account_problem(account))
    problems += [label_problem(key, value) for key, value in labels.items()]
    for problem in problems:
        if problem is not None:
            raise ValueError(problem)


def pod_template_yaml(task_locality: Mapping[str, str], **options: Any) -> str:
    """:func:`executor_pod_template` as YAML (what ``podTemplateFile`` points at)."""
    import yaml

    text: str = yaml.safe_dump(executor_pod_template(task_locality, **options), sort_keys=False)
    return text
