"""What the job looks like now, read from ZooKeeper: the document ``affinity status --json`` prints
and ``/status.json`` serves (the status page draws it).

Only reads. A job model is read once per version (versions never change), so a page refreshing
every few seconds costs a few small reads: the registrations, the version, the barrier, the
history and the election.

The document (format 1; readers ignore unknown fields)::

    {"format": 1, "job": {"name", "id", "folder", "run_id"},
     "leader": {"replica": "coord-a" | null, "replicas": ["coord-a", "coord-b"]},
     "replica": {"id": "coord-b", "leading": false},      # /status only: who serves the page
     "version": {"latest": 8, "in_force": 8},
     "barrier": {"version": 8, "state": "DONE", "expected": [...], "joined": [...]} | null,
     "tasks": 12,
     "processors": [{"id", "location", "live", "tasks"}],   # live or in the model
     "locations": {"name": "", "path": "", "processors": [], "tasks": 12, "children": [...]},
     "rebalances": [history entries, oldest first],
     "batches": [streaming batch entries, oldest first], # a streaming query's (else [])
     "warm_ratio": 0.93 | null}     # a runtime's hook, else the last batch's warm/tasks

A batch entry is :class:`metadata.zk.recipe.batches.BatchEntry` as a dict: ``batch``,
``written_at``, ``seconds``, ``rows_in``, ``tasks``, ``warm``, ``restored``, ``new``,
``bytes_restored``, ``bytes_written``, ``pinned_ok``, ``pinned_total``, ``lag`` (partition ->
records behind) and ``places`` (per task: ``executor``, ``location``, ``pinned_to``, ``source``,
``bytes_restored``, ``bytes_written``, ``rows_in``, ``seconds``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any

from kazoo.exceptions import KazooException

from coordinator.config import JobConfig
from coordinator.protocol.rules import model_in_force
from metadata.ids import location_id_problem
from metadata.model import JobModel
from metadata.zk import ZkMetadataStore

__all__ = ["STATUS_FORMAT", "JobStatusReader", "location_tree"]

STATUS_FORMAT = 1
#: A processor without a location id sits here in the tree.
UNKNOWN_LOCATION = "(no location)"


def location_tree(processors: list[dict[str, Any]]) -> dict[str, Any]:
    """The processors on their location hierarchy (``zone/rack/host`` ids split on ``/``): each
    node has its ``name``, ``path``, the ``processors`` (ids) located exactly there, the ``tasks``
    held below it and its ``children``, sorted by name."""
    root: dict[str, Any] = {"name": "", "path": "", "processors": [], "tasks": 0, "children": []}
    for processor in sorted(processors, key=lambda p: p["id"]):
        node = root
        node["tasks"] += processor["tasks"]
        parts = (processor["location"] or UNKNOWN_LOCATION).split("/")
        for depth, part in enumerate(parts):
            children: list[dict[str, Any]] = node["children"]
            child = next((c for c in children if c["name"] == part), None)
            if child is None:
                path = "/".join(parts[: depth + 1])
                child = {"name": part, "path": path, "processors": [], "tasks": 0, "children": []}
                children.append(child)
                children.sort(key=lambda c: c["name"])
            node = child
            node["tasks"] += processor["tasks"]
        node["processors"].append(processor["id"])
    return root


class JobStatusReader:
    """Reads the status document of one job (see the module docstring).

    Usage::

        reader = JobStatusReader(store, config, replica="coord-a", leading=lambda: True)
        document = reader.read()

    ``warm_ratio`` is the hook for a runtime that knows it (e.g. the Spark demo's share of tasks
    that ran where their state was): a callable returning the ratio, or None when unknown.
    """

    def __init__(
        self,
        store: ZkMetadataStore,
        config: JobConfig,
        *,
        history: int = 20,
        replica: str | None = None,
        leading: Callable[[], bool] | None = None,
        warm_ratio: Callable[[], float | None] | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.history = history
        self.replica = replica
        self.leading = leading
        self.warm_ratio = warm_ratio
        self._models: dict[int, JobModel] = {}

    def _model(self, version: int) -> JobModel:
        if version not in self._models:
            self._models = {version: self.store.job_models.read(version)}  # keep one
        return self._models[version]

    def _leader(self) -> dict[str, Any]:
        try:
            replicas = list(self.store.client.Election(self.store.election_path).contenders())
        except KazooException:
            replicas = []
        return {"replica": replicas[0] if replicas else None, "replicas": replicas}

    def _versions(self) -> tuple[int | None, int | None, dict[str, Any] | None]:
        store = self.store
        latest = store.job_models.latest_version()
        if latest is None:
            return None, None, None
        states = {v: store.barriers.state(v) for v in store.job_models.versions() if v <= latest}
        barrier: dict[str, Any] | None = None
        if states.get(latest) is not None:
            barrier = {
                "version": latest,
                "state": str(states[latest]),
                "expected": sorted(store.barriers.expected(latest)),
                "joined": sorted(store.barriers.participants(latest)),
            }
        return latest, model_in_force(states), barrier

    def read(self) -> dict[str, Any]:
        """The status document, read now."""
        config, store = self.config, self.store
        live = store.processors.locality()
        latest, in_force, barrier = self._versions()
        model = self._model(in_force) if in_force is not None else None
        document: dict[str, Any] = {
            "format": STATUS_FORMAT,
            "job": {
                "name": config.job.name,
                "id": config.job.id,
                "folder": config.job_folder,
                "run_id": config.job.run_id,
            },
            "leader": self._leader(),
            "version": {"latest": latest, "in_force": in_force},
            "barrier": barrier,
            "tasks": len(model.tasks) if model else 0,
            "processors": _processors(live, model),
            "rebalances": [asdict(e) for e in store.history.read(limit=self.history)],
            "batches": [asdict(e) for e in store.batches.read(limit=self.history)],
        }
        document["warm_ratio"] = self.warm_ratio() if self.warm_ratio else None
        if document["warm_ratio"] is None:
            document["warm_ratio"] = _batch_warm_ratio(document["batches"])
        document["locations"] = location_tree(document["processors"])
        if self.replica is not None:
            leading = self.leading() if self.leading else False
            document["replica"] = {"id": self.replica, "leading": leading}
        return document


def _batch_warm_ratio(batches: list[dict[str, Any]]) -> float | None:
    """The share of the last batch's tasks whose state was warm (None: no batch, no task)."""
    last = batches[-1] if batches else None
    return last["warm"] / last["tasks"] if last and last["tasks"] else None


def _processors(live: Mapping[str, str], model: JobModel | None) -> list[dict[str, Any]]:
    """Every live processor and every processor of the model in force, with its task counts."""
    containers = model.containers if model else {}
    rows = []
    for pid in sorted(set(live) | set(containers)):
        container = containers.get(pid)
        location = live.get(pid) or (container.location_id if container else None)
        if location_id_problem(location) is not None:
            location = None  # (a model written before the rule: shown as no location)
        rows.append(
            {
                "id": pid,
                "location": location,
                "live": pid in live,
                "tasks": len(container.tasks) if container else 0,
            }
        )
    return rows
