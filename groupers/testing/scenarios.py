"""Named rebalance scenarios, and runs of a grouper through them (for tests and benchmarks).

A *steady state* is a balanced assignment of ``T`` tasks (``Partition i``, one stream partition
``kafka/events/i`` each) to ``P`` processors (``p-0000`` ...): task ``i`` runs on processor
``i mod P``, and every task's locality is its processor's location. Processor ``j`` lives at host
``j // per_location``; the host's location id is ``host-0007`` (flat) or
``zone-b/rack-02/host-0007`` (hierarchical; zones and racks interleave so that even small
instances span several of them).

The scenarios change the live processors of a steady state and ask for one rebalance:

- :func:`one_leaves`: one processor vanishes;
- :func:`one_joins`: a processor joins, at a new location (``per_location=1``) or at an existing
  one (``per_location > 1``);
- :func:`scale`: ``P -> P * 13 / 10`` (new processors at new hosts, ``per_location`` per host);
- :func:`rolling_restart`: every processor (or a sample) is replaced in turn by a new id at the
  same location, one rebalance per replacement; :func:`run_rolling_restart` drives a grouper
  through the sequence, feeding each step the previous step's answer.

:func:`run_scenario` and :func:`run_rolling_restart` measure each answer against the yardsticks
of :mod:`groupers.testing.oracles`.

Pure: no I/O; imports only the data model, the grouper contract and the oracles.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import overload

from groupers.api import GrouperMetadata, TaskNameGrouper, validate
from groupers.measures import owners
from groupers.testing.oracles import Metrics, combine, measure
from metadata.model import ContainerModel, FrozenMap, SystemStreamPartition, TaskModel

__all__ = [
    "SCENARIO_KINDS",
    "RollingRestart",
    "RollingResult",
    "Scenario",
    "SteadyState",
    "build",
    "location_id",
    "make_tasks",
    "one_joins",
    "one_leaves",
    "processor_id",
    "rebased",
    "rolling_restart",
    "run_rolling_restart",
    "run_scenario",
    "scale",
    "steady_state",
]

SCENARIO_KINDS = ("one-leaves", "one-joins", "scale", "rolling-restart")


# ----------------------------------------------------------------------------- building blocks


def make_tasks(count: int) -> list[TaskModel]:
    """``Partition 0`` .. ``Partition count-1``, each holding ``kafka/events/i``."""
    return [
        TaskModel(f"Partition {i}", frozenset({SystemStreamPartition("kafka", "events", i)}), i)
        for i in range(count)
    ]


def _width(largest_index: int) -> int:
    return max(4, len(str(max(0, largest_index))))


def processor_id(index: int, width: int = 4) -> str:
    """``p-0007`` (zero-padded to ``width`` digits so ids sort like their numbers)."""
    return f"p-{index:0{width}d}"


def location_id(host: int, *, hierarchical: bool = False, width: int = 4) -> str:
    """``host-0007``, or ``zone-b/rack-02/host-0007`` when ``hierarchical``.

    Hierarchical hosts interleave over three zones and, within a zone, four racks, so host ``h``
    is in zone ``"abc"[h % 3]`` and rack ``(h // 3) % 4``.
    """
    host_part = f"host-{host:0{width}d}"
    if not hierarchical:
        return host_part
    return f"zone-{'abc'[host % 3]}/rack-{(host // 3) % 4:02d}/{host_part}"


@dataclass(frozen=True)
class SteadyState:
    """A balanced assignment in force, and the locality it recorded."""

    tasks: list[TaskModel]
    processor_locality: Mapping[str, str]
    assignment: Mapping[str, str]  # task name -> processor id
    task_locality: Mapping[str, str]  # task name -> its processor's location


def steady_state(
    tasks: int,
    processors: int,
    *,
    per_location: int = 1,
    hierarchical: bool = False,
    width: int = 4,
) -> SteadyState:
    """Task ``i`` on processor ``i mod P``; processor ``j`` at host ``j // per_location``."""
    if processors < 1:
        raise ValueError(f"processors must be >= 1, got {processors}")
    if per_location < 1:
        raise ValueError(f"per_location must be >= 1, got {per_location}")
    pids = [processor_id(j, width) for j in range(processors)]
    where = [
        location_id(j // per_location, hierarchical=hierarchical, width=width)
        for j in range(processors)
    ]
    items = make_tasks(tasks)
    assignment: dict[str, str] = {}
    task_locality: dict[str, str] = {}
    for i, item in enumerate(items):
        assignment[item.name] = pids[i % processors]
        task_locality[item.name] = where[i % processors]
    return SteadyState(
        items,
        FrozenMap(zip(pids, where, strict=True)),
        FrozenMap(assignment),
        FrozenMap(task_locality),
    )


@dataclass(frozen=True)
class Scenario:
    """One rebalance: ``before`` is the steady state, ``metadata`` what the grouper is given.

    ``before.processor_locality`` are the processors of the steady state and
    ``before.previous_task_to_processor`` its assignment; ``metadata`` has the new live
    processors and the same task locality and previous assignment.
    """

    name: str
    tasks: list[TaskModel]
    before: GrouperMetadata
    metadata: GrouperMetadata


def _label(kind: str, tasks: int, processors: int, per_location: int, hierarchical: bool) -> str:
    shape = "zone/rack/host" if hierarchical else "host"
    return f"{kind} T={tasks} P={processors} {per_location}/{shape}"


def _scenario(
    kind: str,
    state: SteadyState,
    live: Mapping[str, str],
    per_location: int,
    hierarchical: bool,
) -> Scenario:
    before = GrouperMetadata(state.processor_locality, state.task_locality, state.assignment)
    after = GrouperMetadata(FrozenMap(live), state.task_locality, state.assignment)
    name = _label(kind, len(state.tasks), len(state.processor_locality), per_location, hierarchical)
    return Scenario(name, state.tasks, before, after)


def one_leaves(
    tasks: int, processors: int, *, per_location: int = 1, hierarchical: bool = False
) -> Scenario:
    """Processor ``P // 2`` vanishes (its location keeps ``per_location - 1`` others)."""
    if processors < 2:
        raise ValueError("one_leaves needs at least 2 processors")
    width = _width(processors)
    state = steady_state(
        tasks, processors, per_location=per_location, hierarchical=hierarchical, width=width
    )
    gone = processor_id(processors // 2, width)
    live = {pid: loc for pid, loc in state.processor_locality.items() if pid != gone}
    return _scenario("one-leaves", state, live, per_location, hierarchical)


def one_joins(
    tasks: int, processors: int, *, per_location: int = 1, hierarchical: bool = False
) -> Scenario:
    """Processor ``P`` joins: at a new host when ``per_location == 1``, else on host 0."""
    width = _width(processors)
    state = steady_state(
        tasks, processors, per_location=per_location, hierarchical=hierarchical, width=width
    )
    host = processors if per_location == 1 else 0
    live = dict(state.processor_locality)
    live[processor_id(processors, width)] = location_id(
        host, hierarchical=hierarchical, width=width
    )
    return _scenario("one-joins", state, live, per_location, hierarchical)


def scale(
    tasks: int,
    processors: int,
    *,
    per_location: int = 1,
    hierarchical: bool = False,
    factor: tuple[int, int] = (13, 10),
) -> Scenario:
    """``P -> P * 13 // 10``: the new processors ``P ..`` continue the host numbering
    (``j // per_location``), so with ``P`` a multiple of ``per_location`` they are on new hosts.
    """
    grown = processors * factor[0] // factor[1]
    width = _width(max(processors, grown))
    state = steady_state(
        tasks, processors, per_location=per_location, hierarchical=hierarchical, width=width
    )
    live = dict(state.processor_locality)
    for j in range(processors, grown):
        live[processor_id(j, width)] = location_id(
            j // per_location, hierarchical=hierarchical, width=width
        )
    kind = f"scale {factor[1]}->{factor[0]}"
    return _scenario(kind, state, live, per_location, hierarchical)


@dataclass(frozen=True)
class RollingRestart:
    """A steady state and the replacements ``(old id, new id)``, one rebalance each."""

    name: str
    tasks: list[TaskModel]
    before: GrouperMetadata
    replacements: list[tuple[str, str]]


def rolling_restart(
    tasks: int,
    processors: int,
    *,
    per_location: int = 1,
    hierarchical: bool = False,
    sample: int | None = None,
) -> RollingRestart:
    """Processors ``p-0000``, ``p-0001``, ... (all, or the first ``sample``) are replaced in
    turn by new ids ``p-<P>``, ``p-<P+1>``, ... at the same location.
    """
    count = processors if sample is None else min(sample, processors)
    width = _width(processors + count)
    state = steady_state(
        tasks, processors, per_location=per_location, hierarchical=hierarchical, width=width
    )
    replacements = [
        (processor_id(j, width), processor_id(processors + j, width)) for j in range(count)
    ]
    before = GrouperMetadata(state.processor_locality, state.task_locality, state.assignment)
    name = _label("rolling-restart", tasks, processors, per_location, hierarchical)
    if count < processors:
        name += f" ({count} of {processors} restarted)"
    return RollingRestart(name, state.tasks, before, replacements)


def build(
    kind: str,
    tasks: int,
    processors: int,
    *,
    per_location: int = 1,
    hierarchical: bool = False,
    sample: int | None = None,
) -> Scenario | RollingRestart:
    """The scenario called ``kind`` (one of :data:`SCENARIO_KINDS`)."""
    if kind == "one-leaves":
        return one_leaves(tasks, processors, per_location=per_location, hierarchical=hierarchical)
    if kind == "one-joins":
        return one_joins(tasks, processors, per_location=per_location, hierarchical=hierarchical)
    if kind == "scale":
        return scale(tasks, processors, per_location=per_location, hierarchical=hierarchical)
    if kind == "rolling-restart":
        return rolling_restart(
            tasks, processors, per_location=per_location, hierarchical=hierarchical, sample=sample
        )
    raise ValueError(f"unknown scenario {kind!r}; known: {', '.join(SCENARIO_KINDS)}")


@overload
def rebased(scenario: Scenario, containers: Iterable[ContainerModel]) -> Scenario: ...
@overload
def rebased(scenario: RollingRestart, containers: Iterable[ContainerModel]) -> RollingRestart: ...
def rebased(
    scenario: Scenario | RollingRestart, containers: Iterable[ContainerModel]
) -> Scenario | RollingRestart:
    """The same change, starting from another layout of the same processors.

    ``containers`` is an answer on the processors of ``scenario.before`` (typically a stateless
    peer's own steady state: what it assigns with no history). The previous assignment becomes
    that answer and every task's locality becomes its processor's location there.
    """
    live = scenario.before.processor_locality
    owner = owners(containers)
    located = {name: live[pid] for name, pid in owner.items()}
    before = GrouperMetadata(live, FrozenMap(located), FrozenMap(owner))
    if isinstance(scenario, Scenario):
        after = GrouperMetadata(
            scenario.metadata.processor_locality,
            before.task_locality,
            before.previous_task_to_processor,
        )
        return replace(scenario, before=before, metadata=after)
    return replace(scenario, before=before)


# ----------------------------------------------------------------------------- runs


def run_scenario(
    grouper: TaskNameGrouper, scenario: Scenario, *, exact: bool | None = None
) -> Metrics:
    """Run ``grouper`` on one scenario and measure the answer."""
    containers = grouper.group(scenario.tasks, scenario.metadata)
    return measure(scenario.tasks, scenario.metadata, containers, exact=exact)


@dataclass(frozen=True)
class RollingResult:
    """Per-step metrics and wall times of a rolling restart, and their sum."""

    total: Metrics
    steps: list[Metrics]
    seconds: list[float] = field(default_factory=list)
    final: Mapping[str, str] = field(default_factory=lambda: FrozenMap())


def run_rolling_restart(
    grouper: TaskNameGrouper,
    restart: RollingRestart,
    *,
    exact: bool | None = None,
    check: bool = True,
) -> RollingResult:
    """Drive ``grouper`` through the replacements, one rebalance each.

    Step ``k`` replaces ``old_k`` by ``new_k`` at ``old_k``'s location; its previous assignment
    is step ``k - 1``'s answer, and its task locality is where step ``k - 1`` put each task (the
    processors write locality after the barrier; invariant I4). With ``check`` every answer is
    validated (:func:`groupers.api.validate`); validation is not part of the timed call.
    """
    live = dict(restart.before.processor_locality)
    previous: Mapping[str, str] = restart.before.previous_task_to_processor
    task_locality: Mapping[str, str] = restart.before.task_locality
    steps: list[Metrics] = []
    seconds: list[float] = []
    for old, new in restart.replacements:
        where = live.pop(old)
        live[new] = where
        metadata = GrouperMetadata(FrozenMap(live), task_locality, previous)
        start = time.perf_counter()
        containers = grouper.group(restart.tasks, metadata)
        seconds.append(time.perf_counter() - start)
        if check:
            validate(restart.tasks, metadata, containers)
        steps.append(measure(restart.tasks, metadata, containers, exact=exact))
        owner = owners(containers)
        located = {name: live[pid] for name, pid in owner.items()}
        previous = FrozenMap(owner)
        task_locality = FrozenMap({**task_locality, **located})
    return RollingResult(combine(steps), steps, seconds, previous)
