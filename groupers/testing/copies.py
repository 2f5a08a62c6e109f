"""Named scenarios with caught-up copies, and their check (issue 26): part of the conformance kit.

Both come from Kafka Streams' ``HighAvailabilityTaskAssignorTest``, with its task ids as task
names: task ``s_p`` (subtopology ``s``, partition ``p``) reads partition ``p`` of stream
``topic-s``, which is its stream for spreading (:func:`groupers.spread.stream_of`). Processors
are ``P1``, ``P2``, ... at hosts ``host-1``, ``host-2``, ...

- :func:`caught_up_everywhere`: a fresh assignment (no previous one) of ``streams x partitions``
  tasks where every processor reports the same small lag for every task, so every copy is
  caught up and none singles out a processor. Copies everywhere are no reason to lose spread:
  the answer must spread every stream as evenly as the grouper's own answer without
  ``task_state`` (``host-affinity``: ``P1: 0_0, 1_0, 2_0``, ...). :data:`CAUGHT_UP_EVERYWHERE`
  lists the variants of the issue: capacities 1, 3 and 9 on three processors, and two
  processors.
- :func:`warmed_up_copies`: ``P1`` ran ``0_0, 0_1, 1_0, 1_1``; ``P2`` holds a caught-up copy of
  ``0_1`` and ``P3`` one of ``1_0`` (their other lags are far beyond the bound). Balance wants
  2/1/1, and moving ``0_1`` to ``P2`` and ``1_0`` to ``P3`` costs nothing, so with warm-up on
  that is the answer (``P1`` keeps ``0_0, 1_1``) and no warm-up replica is planned: a move to a
  caught-up copy is taken before any warm-up for that room.

:func:`check_caught_up_scenarios` runs a grouper through both (the second only when it warms up
and may make two moves) and raises AssertionError naming what is wrong;
:func:`groupers.testing.check_replica_options` calls it.

Pure: no I/O, no hypothesis.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from groupers.api import GrouperMetadata, TaskNameGrouper, validate
from groupers.measures import balance_bounds, owners
from groupers.testing.oracles import stream_skew
from metadata.model import ContainerModel, SystemStreamPartition, TaskModel

__all__ = [
    "CAUGHT_UP_EVERYWHERE",
    "FAR_BEHIND",
    "WARMED_UP_ANSWER",
    "CopiesScenario",
    "caught_up_everywhere",
    "check_caught_up_scenarios",
    "kafka_tasks",
    "warmed_up_copies",
]

#: A lag no bound accepts in these scenarios (Kafka Streams' ``Long.MAX_VALUE`` stand-in).
FAR_BEHIND = 10**12


def kafka_tasks(streams: int, partitions: int) -> list[TaskModel]:
    """Tasks ``s_p`` for ``s < streams``, ``p < partitions``: partition ``p`` of ``topic-s``."""
    return [
        TaskModel(f"{s}_{p}", frozenset({SystemStreamPartition("kafka", f"topic-{s}", p)}), p)
        for s in range(streams)
        for p in range(partitions)
    ]


@dataclass(frozen=True)
class CopiesScenario:
    """One call: the tasks, the metadata with ``task_state``, and the lag bound it assumes."""

    name: str
    tasks: list[TaskModel]
    metadata: GrouperMetadata
    acceptable_recovery_lag: int


def _processors(count: int) -> dict[str, str]:
    return {f"P{i}": f"host-{i}" for i in range(1, count + 1)}


def caught_up_everywhere(
    processors: int = 3,
    capacity: int = 1,
    *,
    streams: int = 3,
    partitions: int = 3,
    acceptable_recovery_lag: int = 100,
) -> CopiesScenario:
    """No previous assignment; every processor reports lag ``min(10, acceptable_recovery_lag)``
    for every task (so every copy is caught up)."""
    live = _processors(processors)
    tasks = kafka_tasks(streams, partitions)
    lag = min(10, acceptable_recovery_lag)
    metadata = GrouperMetadata(
        live,
        {},
        {},
        processor_capacity=dict.fromkeys(live, capacity),
        task_state={task.name: dict.fromkeys(live, lag) for task in tasks},
    )
    name = f"caught up everywhere: {processors} processors of capacity {capacity}"
    return CopiesScenario(name, tasks, metadata, acceptable_recovery_lag)


#: The variants of issue 26: capacities 1, 3, 9 on three processors; two processors.
CAUGHT_UP_EVERYWHERE = ((3, 1), (3, 3), (3, 9), (2, 1))


def warmed_up_copies(capacity: int = 5, *, acceptable_recovery_lag: int = 100) -> CopiesScenario:
    """``P1`` ran four tasks; ``P2`` and ``P3`` each hold a caught-up copy of one of them."""
    live = _processors(3)
    tasks = kafka_tasks(2, 2)
    names = [task.name for task in tasks]
    warm = {"0_1": "P2", "1_0": "P3"}
    state = {
        name: {"P1": 0} | {pid: 0 if warm.get(name) == pid else FAR_BEHIND for pid in ("P2", "P3")}
        for name in names
    }
    metadata = GrouperMetadata(
        live,
        dict.fromkeys(names, live["P1"]),
        dict.fromkeys(names, "P1"),
        processor_capacity=dict.fromkeys(live, capacity),
        task_state=state,
    )
    return CopiesScenario(
        "warmed-up copies of 0_1 on P2 and 1_0 on P3", tasks, metadata, acceptable_recovery_lag
    )


#: What :func:`warmed_up_copies` must give (actives per processor) when the grouper warms up.
WARMED_UP_ANSWER = {"P1": ["0_0", "1_1"], "P2": ["0_1"], "P3": ["1_0"]}


def check_caught_up_scenarios(
    grouper: TaskNameGrouper,
    *,
    standby_replicas: int = 0,
    max_warmup_replicas: int = 0,
    acceptable_recovery_lag: int = 0,
    max_moves_per_rebalance: int | None = None,
) -> None:
    """Assert the answers of both scenarios for ``grouper``, built with these options."""
    for processors, capacity in CAUGHT_UP_EVERYWHERE:
        _check_spread(
            grouper,
            caught_up_everywhere(
                processors, capacity, acceptable_recovery_lag=acceptable_recovery_lag
            ),
        )
    if max_warmup_replicas and (max_moves_per_rebalance is None or max_moves_per_rebalance >= 2):
        _check_free_moves_first(
            grouper,
            warmed_up_copies(acceptable_recovery_lag=acceptable_recovery_lag),
            standby_replicas,
        )


def _check_spread(grouper: TaskNameGrouper, scenario: CopiesScenario) -> None:
    md = scenario.metadata
    answer = grouper.group(scenario.tasks, md)
    validate(scenario.tasks, md, answer)
    _check_balance(scenario, answer)
    blind = grouper.group(scenario.tasks, replace(md, task_state={}))
    skew, blind_skew = (
        stream_skew(scenario.tasks, md, answer),
        stream_skew(scenario.tasks, md, blind),
    )
    assert skew <= max(1, blind_skew), (
        f"{scenario.name}: a stream is spread {skew} tasks unevenly with caught-up copies "
        f"everywhere, {blind_skew} without task_state: {_actives(answer)}"
    )


def _check_free_moves_first(
    grouper: TaskNameGrouper, scenario: CopiesScenario, standby_replicas: int
) -> None:
    md = scenario.metadata
    answer = grouper.group(scenario.tasks, md)
    validate(scenario.tasks, md, answer)
    assert _actives(answer) == WARMED_UP_ANSWER, (
        f"{scenario.name}: expected {WARMED_UP_ANSWER} (balance by moves to the caught-up "
        f"copies, no warm-up needed), got {_actives(answer)}"
    )
    wanted = min(standby_replicas, len(md.processor_locality) - 1)
    copies = Counter(name for c in answer for name in c.standby_tasks)
    extra = sorted(name for name, count in copies.items() if count > wanted)
    assert not extra, f"{scenario.name}: warm-up replicas planned for {extra}, none needed"


def _check_balance(scenario: CopiesScenario, answer: set[ContainerModel]) -> None:
    md = scenario.metadata
    lower, upper = balance_bounds(sorted(md.processor_locality), len(scenario.tasks), md, 0)
    counts = Counter(owners(answer).values())
    for pid in md.processor_locality:
        assert lower[pid] <= counts[pid] <= upper[pid], (
            f"{scenario.name}: {pid} has {counts[pid]} tasks, outside [{lower[pid]}, {upper[pid]}]"
        )


def _actives(answer: set[ContainerModel]) -> dict[str, list[str]]:
    return {c.processor_id: sorted(c.tasks) for c in sorted(answer, key=lambda c: c.processor_id)}
