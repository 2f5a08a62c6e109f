"""Hypothesis strategies that make grouper inputs (part of the conformance kit).

:func:`grouper_inputs` draws ``(tasks, metadata)`` with live and vanished processors, flat and
hierarchical location ids, task locality that is mostly consistent with the previous assignment
and sometimes stale or unknown; :func:`virtual_grouper_inputs` draws a SEP-32 split or merge.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace

from hypothesis import strategies as st

from groupers.api import GrouperMetadata
from metadata.model import SystemStreamPartition, TaskModel

__all__ = [
    "GrouperInput",
    "grouper_inputs",
    "locations",
    "task_models",
    "virtual_grouper_inputs",
]

_ZONES = ("zone-a", "zone-b", "zone-c")


@st.composite
def locations(draw: st.DrawFn, scheme: str = "mixed") -> str:
    """A location id: flat (``host-3``) or hierarchical (``zone-a/rack-1/host-3``).

    ``scheme`` is "flat", "hierarchical" or "mixed" (either, drawn per location).
    """
    host = draw(st.integers(0, 5))
    if scheme == "flat" or (scheme == "mixed" and draw(st.booleans())):
        return f"host-{host}"
    zone = draw(st.sampled_from(_ZONES))
    rack = draw(st.integers(0, 1))
    return f"{zone}/rack-{rack}/host-{host}"


@st.composite
def task_models(draw: st.DrawFn, max_tasks: int = 40, streams: int = 1) -> list[TaskModel]:
    """Distinct tasks named like Samza's ``Partition N``, one SSP each: of stream ``events``,
    or with ``streams`` > 1 of one of ``s0`` .. ``s{streams-1}`` each (drawn)."""
    count = draw(st.integers(0, max_tasks))
    numbers = draw(
        st.lists(st.integers(0, 10 * max_tasks + 10), min_size=count, max_size=count, unique=True)
    )
    names = [f"s{i}" for i in range(streams)]
    return [
        TaskModel(
            f"Partition {n}",
            frozenset(
                {
                    SystemStreamPartition(
                        "kafka", draw(st.sampled_from(names)) if streams > 1 else "events", n
                    )
                }
            ),
            n,
        )
        for n in numbers
    ]


@dataclass(frozen=True)
class GrouperInput:
    tasks: list[TaskModel]
    metadata: GrouperMetadata


@st.composite
def grouper_inputs(
    draw: st.DrawFn,
    max_tasks: int = 40,
    max_processors: int = 8,
    min_processors: int = 1,
    schemes: Collection[str] = ("flat", "hierarchical", "mixed"),
    replicas: bool | None = False,
    streams: int = 1,
) -> GrouperInput:
    """Tasks plus metadata: a previous assignment over live and vanished processors.

    Each example uses one location scheme from ``schemes`` (see :func:`locations`). With
    ``replicas`` (None: drawn per example) the metadata also carries ``processor_capacity``
    (1 to 4) and ``task_state`` (copies of some tasks on live or vanished processors, lag 0 to 3).
    With ``streams`` > 1 the tasks read several streams (see :func:`task_models`).
    """
    scheme = draw(st.sampled_from(sorted(schemes)))
    tasks = draw(task_models(max_tasks=max_tasks, streams=streams))
    live_count = draw(st.integers(min_processors, max_processors))
    gone_count = draw(st.integers(0, 3))
    live = [f"p-{i}" for i in range(live_count)]
    gone = [f"gone-{i}" for i in range(gone_count)]
    where = {pid: draw(locations(scheme)) for pid in live + gone}
    previous: dict[str, str] = {}
    task_locality: dict[str, str] = {}
    owners = live + gone
    for task in tasks:
        kind = draw(st.sampled_from(("prev", "prev", "prev", "new", "stale", "unknown-loc")))
        if kind == "new" or not owners:
            continue
        owner = draw(st.sampled_from(owners))
        previous[task.name] = owner
        if kind == "prev":
            task_locality[task.name] = where[owner]
        elif kind == "stale":
            task_locality[task.name] = draw(locations(scheme))
    metadata = GrouperMetadata(
        processor_locality={pid: where[pid] for pid in live},
        task_locality=task_locality,
        previous_task_to_processor=previous,
    )
    if replicas or (replicas is None and draw(st.booleans())):
        capacity, state = draw(_replica_fields(tasks, live, owners))
        metadata = replace(metadata, processor_capacity=capacity, task_state=state)
    return GrouperInput(tasks, metadata)


@st.composite
def _replica_fields(
    draw: st.DrawFn, tasks: list[TaskModel], live: list[str], holders: list[str]
) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """``processor_capacity`` and ``task_state`` for :func:`grouper_inputs`."""
    capacity = {pid: draw(st.integers(1, 4)) for pid in live if draw(st.booleans())}
    state: dict[str, dict[str, int]] = {}
    for task in tasks if holders else ():
        copies = draw(st.lists(st.sampled_from(holders), max_size=2, unique=True))
        if copies:
            state[task.name] = {pid: draw(st.integers(0, 3)) for pid in copies}
    return capacity, state


def _virtual_tasks(partitions: int, factor: int) -> list[TaskModel]:
    """``group-by-partition`` tasks of one 'events' and one 'clicks' input at ``factor``."""
    tasks = []
    for p in range(partitions):
        for b in range(factor) if factor > 1 else (-1,):
            name = f"Partition {p}" if factor == 1 else f"Partition {p}-{b}-{factor}"
            ssps = {SystemStreamPartition("kafka", s, p, b) for s in ("events", "clicks")}
            tasks.append(TaskModel(name, frozenset(ssps), p * factor + max(b, 0)))
    return tasks


@st.composite
def virtual_grouper_inputs(
    draw: st.DrawFn,
    max_partitions: int = 6,
    max_processors: int = 8,
    schemes: Collection[str] = ("flat", "hierarchical", "mixed"),
) -> GrouperInput:
    """A SEP-32 split or merge: tasks at a new elasticity factor, history under the old names.

    The previous tasks (factor ``f``) ran on live and vanished processors with mostly accurate
    locality; the requested tasks have factor ``2f``, ``f/2``, 1 or 8, and the metadata carries
    the previous tasks' stream partitions in ``previous_task_to_ssps``.
    """
    scheme = draw(st.sampled_from(sorted(schemes)))
    partitions = draw(st.integers(1, max_partitions))
    old_factor = draw(st.sampled_from((1, 2, 4)))
    new_factor = draw(st.sampled_from(sorted({max(1, old_factor // 2), old_factor * 2, 1, 8})))
    old_tasks = _virtual_tasks(partitions, old_factor)
    new_tasks = _virtual_tasks(partitions, new_factor)
    live = [f"p-{i}" for i in range(draw(st.integers(1, max_processors)))]
    gone = [f"gone-{i}" for i in range(draw(st.integers(0, 2)))]
    where = {pid: draw(locations(scheme)) for pid in live + gone}
    previous: dict[str, str] = {}
    task_locality: dict[str, str] = {}
    for task in old_tasks:
        kind = draw(st.sampled_from(("prev", "prev", "prev", "none", "stale")))
        if kind == "none":
            continue
        owner = draw(st.sampled_from(live + gone))
        previous[task.name] = owner
        task_locality[task.name] = where[owner] if kind == "prev" else draw(locations(scheme))
    metadata = GrouperMetadata(
        processor_locality={pid: where[pid] for pid in live},
        task_locality=task_locality,
        previous_task_to_processor=previous,
        previous_task_to_ssps={t.name: t.partitions for t in old_tasks},
    )
    return GrouperInput(new_tasks, metadata)
