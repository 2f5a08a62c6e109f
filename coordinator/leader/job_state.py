"""What a new leader reads from ZooKeeper before it leads (the :class:`LeadershipGained` event).

Corrupt data is handled by how much it matters:

- the **latest** version (``jobModelVersion`` garbage or pointing at a missing version, its
  manifest or a chunk corrupt) cannot be skipped: the next version number and the barrier in
  flight depend on it. The error (naming the node) propagates; the replica steps down and backs
  off (:mod:`coordinator.leader.service`), and the model in force stays where it is;
- an **older** version (the model in force, when newer versions timed out) that cannot be read
  is treated as missing: the next older DONE version is used instead, and the leader logs
  ``coordinator.corrupt_version_skipped`` with the node;
- a barrier state that is not NEW, DONE or TIMED_OUT reads as unknown (neither pending nor in
  force), logged as ``coordinator.corrupt_barrier_state``;
- a corrupt **locality** entry reads as missing (that task has no recorded location), logged as
  ``coordinator.corrupt_locality_skipped``; a corrupt run marker reads as no locality at all.
"""

from __future__ import annotations

from typing import Any

from coordinator.protocol.leader_events import LeadershipGained
from coordinator.protocol.rules import IN_FORCE_SCAN, model_in_force
from metadata.errors import CorruptDataError
from metadata.model import BarrierState, JobModel
from metadata.zk import NotFound, ZkMetadataStore

__all__ = ["read_job_state"]


def _locality(store: ZkMetadataStore, log: Any) -> dict[str, str]:
    def skip(exc: CorruptDataError) -> None:
        log.warning("coordinator.corrupt_locality_skipped", node=exc.path, problem=exc.problem)

    try:
        return store.locality.read(on_corrupt=skip)
    except CorruptDataError as exc:
        log.warning("coordinator.corrupt_locality_skipped", node=exc.path, problem=exc.problem)
        return {}


def _barrier_states(
    store: ZkMetadataStore, latest: int, log: Any
) -> dict[int, BarrierState | None]:
    states: dict[int, BarrierState | None] = {}
    for version in range(latest, max(0, latest - IN_FORCE_SCAN), -1):
        try:
            states[version] = store.barriers.state(version)
        except CorruptDataError as exc:
            log.warning("coordinator.corrupt_barrier_state", node=exc.path, problem=exc.problem)
            states[version] = None
    return states


def _in_force(
    store: ZkMetadataStore, latest: JobModel, states: dict[int, BarrierState | None], log: Any
) -> JobModel | None:
    """The newest DONE version that can be read (a corrupt or missing older one is skipped)."""
    candidates = dict(states)
    while (version := model_in_force(candidates)) is not None:
        if version == latest.version:
            return latest
        try:
            return store.job_models.read(version)
        except (CorruptDataError, NotFound) as exc:
            log.warning(
                "coordinator.corrupt_version_skipped",
                version=version,
                node=getattr(exc, "path", ""),
                problem=str(exc),
            )
            del candidates[version]
    return None


def read_job_state(
    store: ZkMetadataStore, now: float, log: Any, tasks: frozenset[str] | None = None
) -> LeadershipGained:
    """Processors, locality, the latest model and its barrier, and the model in force
    (:func:`~coordinator.protocol.rules.model_in_force`), past corrupt old data, with the
    job's task names (``tasks``). It syncs first: the state as the ZooKeeper leader has it, not
    a lagging follower's (SAMZA-2301)."""
    store.sync()
    processors, capacity = store.processors.members()
    locality = _locality(store, log)
    latest_version = store.job_models.latest_version()
    if latest_version is None:
        return LeadershipGained(now, processors, locality, capacity=capacity, tasks=tasks)
    latest = store.job_models.read(latest_version)
    states = _barrier_states(store, latest_version, log)
    return LeadershipGained(
        now,
        processors,
        locality,
        latest=latest,
        latest_barrier=states[latest_version],
        latest_participants=frozenset(store.barriers.participants(latest_version)),
        in_force=_in_force(store, latest, states, log),
        capacity=capacity,
        tasks=tasks,
    )
