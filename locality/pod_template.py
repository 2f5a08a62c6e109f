"""Kubernetes executor pod templates that steer Spark executors to the nodes holding task state.

Spark on Kubernetes builds each executor pod from ``spark.kubernetes.executor.podTemplateFile``.
:func:`executor_pod_template` writes that template with a *preferred* node affinity
(``preferredDuringSchedulingIgnoredDuringExecution``): every node where some task last ran gets a
weight from 1 to 100, scaled by the number of tasks whose state is there (the node with the most
tasks gets 100). The scheduler adds the weight of every term a node matches, so executors go to
the nodes with the most state first, and still start anywhere when those nodes are full or gone
(the affinity is preferred, never required).

Location ids are hierarchical (``zone/node``, ``zone/rack/node``); the node is the last path
component unless ``node_of`` says otherwise. Nodes are matched by the label ``topology_key``
(``kubernetes.io/hostname``, which equals the node name on most clusters).

May import ``metadata.model`` only; never ``groupers`` or ``coordinator``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "DEFAULT_CONTAINER_NAME",
    "HOSTNAME_LABEL",
    "executor_pod_template",
    "node_weights",
    "pod_template_yaml",
]

#: The executor container Spark looks for (``spark.kubernetes.executor.podTemplateContainerName``).
DEFAULT_CONTAINER_NAME = "spark-kubernetes-executor"
#: The well-known node label holding the node's host name.
HOSTNAME_LABEL = "kubernetes.io/hostname"
MAX_WEIGHT = 100


def _last_component(location_id: str) -> str:
    return location_id.strip().strip("/").rsplit("/", 1)[-1]


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


def executor_pod_template(
    task_locality: Mapping[str, str],
    *,
    node_of: Callable[[str], str] | None = None,
    topology_key: str = HOSTNAME_LABEL,
    container_name: str = DEFAULT_CONTAINER_NAME,
    labels: Mapping[str, str] | None = None,
    name: str = "spark-executor",
) -> dict[str, Any]:
    """A Pod manifest for ``spark.kubernetes.executor.podTemplateFile``.

    ``task_locality`` maps task name -> location id (``zone/node``) where its state is, as
    ``ZkMetadataStore.locality.read()`` returns it. Nodes with the same weight share one
    preference term. With no locality the template has no affinity at all. ``name`` is a
    placeholder (Spark names each executor pod itself); tools that list manifests want one.
    """
    weights = node_weights(task_locality, node_of=node_of)
    by_weight: dict[int, list[str]] = {}
    for node, weight in weights.items():
        by_weight.setdefault(weight, []).append(node)
    terms = [
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
    spec: dict[str, Any] = {"containers": [{"name": container_name}]}
    if terms:
        spec["affinity"] = {
            "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": terms}
        }
    metadata: dict[str, Any] = {
        "name": name,
        "labels": {
            "app.kubernetes.io/managed-by": "affinity",
            "app.kubernetes.io/component": "spark-executor",
            **(labels or {}),
        },
        "annotations": {
            "affinity/tasks-with-locality": str(len(task_locality)),
            "affinity/preferred-nodes": str(len(weights)),
        },
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def pod_template_yaml(
    task_locality: Mapping[str, str], *, node_of: Callable[[str], str] | None = None
) -> str:
    """:func:`executor_pod_template` as YAML (what ``podTemplateFile`` points at)."""
    import yaml

    text: str = yaml.safe_dump(
        executor_pod_template(task_locality, node_of=node_of), sort_keys=False
    )
    return text
