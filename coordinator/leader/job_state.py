"""What a new leader reads from ZooKeeper before it leads (the :class:`LeadershipGained` event).

Corrupt data is read past, and reported to the leader machine, which decides what to do with it
(:mod:`coordinator.protocol.leader_recovery`):

- the **version pointer** (``jobModelVersion``) that is garbage, empty while versions are stored,
  or names a version that does not exist; the **latest version** or the **model in force** (the
  newest DONE version) whose manifest or a chunk cannot be read: each is an
  :class:`~coordinator.protocol.leader_recovery.Unreadable` naming its node, logged as
  ``coordinator.corrupt_version_skipped``. The model in force is the newest DONE version that
  reads clean (or none); new versions go above the highest version number stored
  (``version_floor``: the pointer, ``jobModels/`` and ``barriers/``, when the pointer cannot be
  trusted). The leader then publishes a new version at once;
- a barrier state that is not NEW, DONE or TIMED_OUT reads as unknown (neither pending nor in
  force), logged as ``coordinator.corrupt_barrier_state``;
- a corrupt **locality** entry reads as missing (that task has no recorded location), logged as
  ``coordinator.corrupt_locality_skipped``; a corrupt run marker reads as no locality at all.

What cannot be read for other reasons (ZooKeeper unreachable, access denied) propagates: the
replica steps down and backs off (:mod:`coordinator.leader.service`).
"""

from __future__ import annotations

from typing import Any

from coordinator.protocol.leader_events import LeadershipGained
from coordinator.protocol.leader_recovery import Unreadable, next_to_read
from coordinator.protocol.rules import IN_FORCE_SCAN
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


def _unreadable(version: int | None, exc: Exception, path: str, log: Any) -> Unreadable:
    node = getattr(exc, "path", "") or path
    problem = getattr(exc, "problem", "") or str(exc)
    log.warning("coordinator.corrupt_version_skipped", version=version, node=node, problem=problem)
    return Unreadable(version, node, problem)


def _read(
    store: ZkMetadataStore, version: int, found: list[Unreadable], log: Any
) -> JobModel | None:
    """Job model ``version``, or None (recorded in ``found``) if it cannot be read."""
    try:
        return store.job_models.read(version)
    except (CorruptDataError, NotFound) as exc:
        found.append(_unreadable(version, exc, store.layout.job_model(version), log))
        return None


def _pointer(store: ZkMetadataStore, found: list[Unreadable], log: Any) -> tuple[int | None, int]:
    """The version the pointer names (None: unusable, or no version published) and the highest
    version number stored (the pointer's when it can be trusted, else the highest listed)."""
    path = store.layout.job_model_version
    try:
        pointer = store.job_models.latest_version()
    except CorruptDataError as exc:
        found.append(_unreadable(None, exc, path, log))
        pointer = None
    if pointer is not None:
        return pointer, pointer
    stored = sorted({*store.job_models.versions(), *store.barriers.versions()})
    if stored and not found:
        problem = f"empty, yet versions {stored[0]}..{stored[-1]} are stored"
        found.append(_unreadable(None, CorruptDataError(path, problem), path, log))
    return None, stored[-1] if stored else 0


def _latest(
    store: ZkMetadataStore, pointer: int, found: list[Unreadable], log: Any
) -> JobModel | None:
    """The version the pointer names, or None (recorded in ``found``): a pointer naming a version
    that does not exist (or is not committed) is the pointer's fault."""
    try:
        return store.job_models.read(pointer)
    except NotFound as exc:
        path = store.layout.job_model_version
        problem = f"names version {pointer}: {exc.problem}"
        found.append(_unreadable(None, CorruptDataError(path, problem), path, log))
    except CorruptDataError as exc:
        found.append(_unreadable(pointer, exc, store.layout.job_model(pointer), log))
    return None


def _in_force(
    store: ZkMetadataStore,
    latest: JobModel | None,
    states: dict[int, BarrierState | None],
    found: list[Unreadable],
    log: Any,
) -> JobModel | None:
    """The newest DONE version that reads clean (the others are recorded in ``found``)."""
    bad = {u.version for u in found if u.version is not None}
    while (version := next_to_read(states, bad)) is not None:
        if latest is not None and version == latest.version:
            return latest
        model = _read(store, version, found, log)
        if model is not None:
            return model
        bad.add(version)
    return None


def read_job_state(
    store: ZkMetadataStore, now: float, log: Any, tasks: frozenset[str] | None = None
) -> LeadershipGained:
    """Processors, locality, the latest model and its barrier, and the model in force, past
    corrupt data (module docstring), with the job's task names (``tasks``). It syncs first: the
    state as the ZooKeeper leader has it, not a lagging follower's (SAMZA-2301)."""
    store.sync()
    processors, capacity = store.processors.members()
    locality = _locality(store, log)
    found: list[Unreadable] = []
    pointer, floor = _pointer(store, found, log)
    if pointer is None and floor == 0:
        return LeadershipGained(
            now, processors, locality, capacity=capacity, tasks=tasks, unreadable=tuple(found)
        )
    latest = None if pointer is None else _latest(store, pointer, found, log)
    states = _barrier_states(store, floor, log)
    in_force = _in_force(store, latest, states, found, log)
    return LeadershipGained(
        now,
        processors,
        locality,
        latest=latest,
        latest_barrier=states[floor] if latest is not None else None,
        latest_participants=(
            frozenset(store.barriers.participants(floor)) if latest is not None else frozenset()
        ),
        in_force=in_force,
        capacity=capacity,
        tasks=tasks,
        unreadable=tuple(found),
        version_floor=floor,
        abandoned=tuple(
            v
            for v, state in sorted(states.items())
            if state == BarrierState.NEW and (latest is None or v != latest.version)
        ),
    )
