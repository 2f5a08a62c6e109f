"""Every unusable node of a job, read from ZooKeeper for ``affinity repair`` (read-only).

:func:`find_damage` reads the version pointer, every stored job-model version in full (manifest
and chunks), every barrier state, the task locality, the rebalance history and the checkpoints,
and returns a :class:`Damage`: what it found (:class:`~coordinator.protocol.repair.Finding`, each
naming its node and problem) and what the plan needs (the version the pointer names, the barrier
states). What to do with each finding is :func:`coordinator.protocol.repair.plan_repair`'s.
Reading every version costs what reading the models costs (a few seconds at 1,000,000 tasks).
A version whose manifest is empty (a publish in progress) is not damage.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.protocol.repair import Finding, Kind
from metadata.errors import CorruptDataError
from metadata.model import BarrierState
from metadata.zk import NotFound, ZkMetadataStore
from metadata.zk.recipe.history import RebalanceEntry

__all__ = ["Damage", "find_damage"]


@dataclass(frozen=True)
class Damage:
    findings: list[Finding]
    pointer: int | None  # the version the pointer names (None: unusable, or none published)
    states: dict[int, BarrierState | None]  # each stored barrier's state (None: unusable)


def _zversion(store: ZkMetadataStore, path: str) -> int:
    found = store.read_node(path)
    return -1 if found is None else found[1]


def _found(
    store: ZkMetadataStore, kind: Kind, node: str, exc: CorruptDataError, version: int
) -> Finding:
    """The finding of ``node``, unusable because ``exc.path`` (it, or a node below it: a
    chunk) failed to read, with the znode versions of both."""
    unreadable = exc.path if exc.path != node else ""
    return Finding(
        kind,
        node,
        exc.problem,
        _zversion(store, node),
        version,
        exc.path,
        _zversion(store, unreadable) if unreadable else -1,
    )


def _pointer(store: ZkMetadataStore, findings: list[Finding]) -> int | None:
    path = store.layout.job_model_version
    try:
        pointer = store.job_models.latest_version()
    except CorruptDataError as exc:
        findings.append(Finding(Kind.POINTER, path, exc.problem, _zversion(store, path)))
        return None
    stored = store.job_models.versions()
    if pointer is None and stored:
        problem = f"empty, yet versions {stored[0]}..{stored[-1]} are stored"
        findings.append(Finding(Kind.POINTER, path, problem, _zversion(store, path)))
    elif pointer is not None and pointer not in stored:
        problem = f"names version {pointer}, which does not exist"
        findings.append(Finding(Kind.POINTER, path, problem, _zversion(store, path)))
    return pointer


def _versions(store: ZkMetadataStore, findings: list[Finding]) -> None:
    for version in store.job_models.versions():
        try:
            store.job_models.read(version)
        except NotFound:
            continue  # not committed: a publish in progress (or its leftover, the leader's)
        except CorruptDataError as exc:
            node = store.layout.job_model(version)
            findings.append(_found(store, Kind.VERSION, node, exc, version))


def _barriers(store: ZkMetadataStore, findings: list[Finding]) -> dict[int, BarrierState | None]:
    states: dict[int, BarrierState | None] = {}
    for version in store.barriers.versions():
        try:
            states[version] = store.barriers.state(version)
        except CorruptDataError as exc:
            states[version] = None
            node = store.layout.barrier(version)
            findings.append(_found(store, Kind.BARRIER, node, exc, version))
    return states


def _locality(store: ZkMetadataStore, findings: list[Finding]) -> None:
    bad: list[CorruptDataError] = []
    try:
        store.locality.read(on_corrupt=bad.append)
    except CorruptDataError as exc:  # the run marker: left (its folder holds every entry)
        findings.append(Finding(Kind.MARKER, exc.path, exc.problem))
        return
    for entry in bad:
        zversion = _zversion(store, entry.path)
        findings.append(Finding(Kind.LOCALITY, entry.path, entry.problem, zversion))


def _history(store: ZkMetadataStore, findings: list[Finding]) -> None:
    for version in store.history.versions():
        path = store.layout.history_entry(version)
        found = store.read_node(path)
        if found is None:
            continue
        try:
            RebalanceEntry.from_json(found[0], path)
        except CorruptDataError as exc:
            findings.append(Finding(Kind.HISTORY, path, exc.problem, found[1]))


def _checkpoints(store: ZkMetadataStore, findings: list[Finding]) -> None:
    try:
        store.checkpoints.read_all()
    except CorruptDataError as exc:  # the first one; readers and writers refuse it
        findings.append(Finding(Kind.CHECKPOINT, exc.path, exc.problem))


def find_damage(store: ZkMetadataStore) -> Damage:
    """Every unusable node of the job (module docstring). Reads only."""
    store.sync()
    findings: list[Finding] = []
    pointer = _pointer(store, findings)
    _versions(store, findings)
    states = _barriers(store, findings)
    _locality(store, findings)
    _history(store, findings)
    _checkpoints(store, findings)
    return Damage(findings, pointer, states)
