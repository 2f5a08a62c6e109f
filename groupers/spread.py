"""Spread: the order in which ``host-affinity`` breaks ties between tasks, dealing streams
round-robin (issue 13 item 7).

Every choice among equally good tasks (which orphans fill a processor's room, which tasks a
processor gives up) is made in one fixed order of the tasks. Name order puts all partitions of
one stream together (``SystemStreamPartition [kafka, clicks, 0..3]`` before ``orders``), so a
fresh assignment gave one processor every ``clicks`` partition. :func:`spread_order` interleaves
the streams instead: the first task of every stream, then the second of every stream, ... (each
stream's tasks in name order), so the tasks a choice takes hold a share of every stream; where
the tasks of one place go to several processors they are dealt by stream
(:meth:`groupers.assignment.Assignment.deal`), so every processor's share of a fresh or
rebalanced assignment holds floor or ceil of every stream's. A task's *stream* is the set of
``(system, stream)`` of its partitions, so tasks that all read the same streams
(``group-by-partition``) keep name order, as do inputs with a single stream.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from metadata.model import TaskModel

__all__ = ["Spread", "spread_of", "spread_order", "stream_of"]


class Spread(NamedTuple):
    """The spread order of a job's tasks and each task's stream (both needed by the grouper:
    the order for every choice, the streams to deal a place's tasks by stream)."""

    order: list[str]
    stream: dict[str, str]  # task name -> its stream


def stream_of(task: TaskModel) -> str:
    """The streams a task reads (its *stream* for spreading), as one sortable string."""
    partitions = task.partitions
    if len(partitions) == 1:
        for ssp in partitions:
            return f"{ssp.system}\0{ssp.stream}"
    return "\1".join(sorted({f"{ssp.system}\0{ssp.stream}" for ssp in partitions}))


def spread_of(tasks: Iterable[TaskModel]) -> Spread | None:
    """The tasks' spread order and streams, or None when every task reads the same streams
    (then name order is that order already, and there is nothing to deal)."""
    tasks = list(tasks)
    streams = {(ssp.system, ssp.stream) for task in tasks for ssp in task.partitions}
    if len(streams) < 2:
        return None  # one stream (or none): nothing to deal
    stream = {task.name: stream_of(task) for task in tasks}
    by_stream: dict[str, list[str]] = {}
    for name, of in stream.items():
        by_stream.setdefault(of, []).append(name)
    if len(by_stream) < 2:
        return None
    ranked: list[tuple[int, str, str]] = []
    for of, names in by_stream.items():
        names.sort()
        ranked.extend((rank, of, name) for rank, name in enumerate(names))
    ranked.sort()
    return Spread([name for _, _, name in ranked], stream)


def spread_order(tasks: Iterable[TaskModel]) -> list[str] | None:
    """Task names with the streams dealt round-robin (see the module docstring), or None when
    every task reads the same streams (then name order is that order already)."""
    spread = spread_of(tasks)
    return spread.order if spread is not None else None
