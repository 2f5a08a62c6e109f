"""The small rules both sides of the barrier protocol share (pure functions, no I/O).

- :func:`losing_processors`: who loses a task when a model replaces the one in force. The leader
  writes them into the manifest of the new version (``base``, ``losing``), and
- :func:`keeps_everything`: the early-join rule a member applies to that manifest: a member that
  runs ``base`` and is not losing has nothing to stop, so it joins before reading its tasks.
- :func:`gaining_processors` and :func:`container_unchanged`: the processors that gain a task
  (the leader writes them into the manifest too, ``gaining``), and the rule a member applies: one
  that runs ``base`` and neither loses nor gains has the same container, so it reads none.
- :func:`model_in_force`: which stored version is in force (the newest whose barrier is DONE).
- :func:`retention_floor`: the oldest version retention keeps once a barrier is decided (the
  newest ``retention`` versions, and never the model in force).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from metadata.model import BarrierState, JobModel, TaskModel

__all__ = [
    "tasks_match",
    "IN_FORCE_SCAN",
    "container_unchanged",
    "gaining_processors",
    "keeps_everything",
    "losing_processors",
    "model_in_force",
    "retention_floor",
    "tasks_changed",
]

#: How many versions back a new leader looks for the model in force.
IN_FORCE_SCAN = 50


def tasks_changed(
    running: Mapping[str, TaskModel], assigned: Mapping[str, TaskModel]
) -> dict[str, TaskModel]:
    """The tasks of ``running`` that ``assigned`` takes away or changes (same name, other
    partitions). Read the other way round, the tasks of ``assigned`` new to a processor."""
    return {name: task for name, task in running.items() if assigned.get(name) != task}


def losing_processors(previous: JobModel, model: JobModel) -> frozenset[str]:
    """The processors of ``previous`` that do not keep every one of their tasks (the same task
    model under the same name) in ``model``, or are not in it."""
    empty: Mapping[str, TaskModel] = {}
    return frozenset(
        pid
        for pid, before in previous.containers.items()
        if tasks_changed(
            before.tasks, model.containers[pid].tasks if pid in model.containers else empty
        )
        or pid not in model.containers
    )


def gaining_processors(previous: JobModel, model: JobModel) -> frozenset[str]:
    """The processors of ``model`` given a task (a new one, or one changed) against
    ``previous``, or whose standby replicas differ, or not in it: with :func:`losing_processors`,
    every processor whose container differs."""
    before = previous.containers
    return frozenset(
        pid
        for pid, after in model.containers.items()
        if pid not in before
        or tasks_changed(after.tasks, before[pid].tasks)
        or after.standby_tasks != before[pid].standby_tasks
    )


def container_unchanged(
    processor_id: str,
    running_version: int | None,
    base: int | None,
    losing: Collection[str],
    gaining: Collection[str] | None,
) -> bool:
    """A member running ``running_version`` has the same container in a model planned against
    ``base`` when it keeps everything (:func:`keeps_everything`) and the manifest says who gains
    (``gaining`` not None) and it is not among them: it need not read its container."""
    return (
        gaining is not None
        and processor_id not in gaining
        and keeps_everything(processor_id, running_version, base, losing)
    )


def keeps_everything(
    processor_id: str, running_version: int | None, base: int | None, losing: Collection[str]
) -> bool:
    """The early-join rule: a member running ``running_version`` keeps every task it runs in a
    model planned against ``base`` when it runs exactly ``base`` and is not among ``losing``."""
    return base is not None and running_version == base and processor_id not in losing


def tasks_match(model: JobModel, tasks: frozenset[str] | None) -> bool:
    """Whether ``model`` assigns exactly the job's ``tasks`` (None: not known, so yes)."""
    if tasks is None:
        return True
    return {t for c in model.containers.values() for t in c.tasks} == tasks


def model_in_force(barriers: Mapping[int, BarrierState | None]) -> int | None:
    """The version in force among stored versions and their barrier states: the newest DONE."""
    done = [version for version, state in barriers.items() if state == BarrierState.DONE]
    return max(done) if done else None


def retention_floor(latest: int, retention: int, in_force: int | None) -> int:
    """The oldest version to keep: the newest ``retention`` versions up to ``latest``, and the
    model in force even when newer versions timed out after it."""
    floor = latest - retention + 1
    return floor if in_force is None else min(floor, in_force)
