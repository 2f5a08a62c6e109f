"""Replicas and probing rebalances: the leader's pure rules for standby copies (no I/O).

Theory of operation
===================

**What the grouper is told of copies.** Members report the lag of each standby copy they hold
(``standbyLag/``, :mod:`metadata.zk.recipe.standby_lag`); the adapter reads the reports of the
live processors when it runs the grouper and :func:`task_state` turns them into
``GrouperMetadata.task_state`` (task -> {processor: lag}). The processor running a task in the
model in force holds its state by definition: it counts as caught up (lag 0), whatever it
reported.

**Is an answer final?** A grouper with warm-up replicas or a movement limit answers in steps: a
task that balance wants elsewhere stays while a warm-up copy catches up at its target, and at
most ``max_moves_per_rebalance`` tasks move at once. Such an answer is not a *fixed point*: run
again once it is in force, the grouper would move more. The leader cannot see warm-ups in the
answer (a warm-up replica is a standby like any other) and must not know a grouper's options,
so it asks the grouper itself, once the answer is in force (its barrier DONE: the recheck never
delays a publish), running it a second time on :func:`recheck_metadata`,
the question the grouper will be asked once the answer is in force *and every copy the answer
places has caught up* (the answer as the previous model, its tasks at its processors'
locations, every active and standby copy at lag 0). :func:`settled` compares: the same answer
means nothing is pending (no warm-up waits: with every copy caught up nothing would move, and no
move was held back); another answer means the job is not where the grouper wants it yet.

Why optimistic lags and not the real ones: with the real lags a pending warm-up *is* a fixed
point (the task stays until its copy catches up, which no rebalance can hasten), so a re-run
would hide exactly the case probing exists for. The cost is one more grouper run per model in
force, after its barrier.

**Probing.** While the model in force is not settled, the leader machine rebalances again every
``probing_interval_s`` (trigger ``probing`` in the rebalance history): it runs the grouper with
the lags reported by then; an answer equal to the model in force publishes nothing (and its
recheck says again whether to keep probing), another one is published like any rebalance. So a
warm-up completes one probe after its copy reports a lag within ``acceptable_recovery_lag``, and
a scale-out held back by the movement limit moves the next tasks one probe after the previous
version is DONE. A membership change rebalances at once as before (its answer's settledness
replaces the old one). A new leader does not know whether the model in force is settled: it
probes once.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace

from coordinator.protocol.leader_policy import BadAnswer, check_answer
from groupers import GrouperMetadata
from metadata.model import ContainerModel, FrozenMap, TaskModel

__all__ = ["recheck_metadata", "settled", "task_state"]


def task_state(
    lags: Mapping[str, Mapping[str, int]],
    active: Mapping[str, str],
    processors: Collection[str],
) -> dict[str, dict[str, int]]:
    """Task -> {processor: lag} from ``lags`` (processor -> {task: lag}, as reported), for the
    live ``processors`` only; each task's ``active`` processor (in the model in force) counts as
    caught up (lag 0)."""
    live = set(processors)
    state: dict[str, dict[str, int]] = {}
    for pid, copies in sorted(lags.items()):
        if pid in live:
            for task, lag in copies.items():
                state.setdefault(task, {})[pid] = lag
    for task, pid in active.items():
        if pid in live:
            state.setdefault(task, {})[pid] = 0
    return state


def recheck_metadata(metadata: GrouperMetadata, answer: object) -> GrouperMetadata | None:
    """What the grouper is asked to tell whether ``answer`` (its answer to ``metadata``) is a
    fixed point: the same processors, ``answer`` as the model in force, its tasks at its
    processors' locations, and every copy it places (active or standby) caught up. None when
    ``answer`` is not a collection of containers (it will be refused anyway)."""
    if not isinstance(answer, Collection) or not all(isinstance(c, ContainerModel) for c in answer):
        return None
    containers: list[ContainerModel] = list(answer)
    owner = {name: c.processor_id for c in containers for name in c.tasks}
    state: dict[str, dict[str, int]] = {name: {pid: 0} for name, pid in owner.items()}
    for c in containers:
        for name in c.standby_tasks:
            state.setdefault(name, {})[c.processor_id] = 0
    return replace(
        metadata,
        task_locality={
            **metadata.task_locality,
            **{name: c.location_id for c in containers if c.location_id for name in c.tasks},
        },
        previous_task_to_processor=owner,
        previous_task_to_ssps={n: t.partitions for c in containers for n, t in c.tasks.items()},
        task_state=state,
    )


def settled(
    tasks: Collection[TaskModel],
    metadata: GrouperMetadata,
    containers: Mapping[str, ContainerModel],
    recheck: object,
    *,
    question: GrouperMetadata | None = None,
) -> bool:
    """Is the answer ``containers`` (valid for ``metadata``) a fixed point, given ``recheck``,
    the grouper's answer to ``question``, ``recheck_metadata(metadata, containers)`` (worked
    out here unless given)? None (no recheck, or it failed) and an invalid recheck count as
    settled: probing needs the grouper to say so."""
    if recheck is None:
        return True
    if question is None:
        question = recheck_metadata(metadata, list(containers.values()))
    if question is None:
        return True
    try:
        again = check_answer(tasks, question, recheck)
    except BadAnswer:
        return True
    return FrozenMap(again) == FrozenMap(containers)
