"""Waiting in tests: poll a condition until it holds, or fail after a timeout."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from metadata.model import ContainerModel, FrozenMap, JobModel, SystemStreamPartition, TaskModel


def wait_for(predicate: Callable[[], bool], timeout_s: float = 20.0) -> None:
    """Return once ``predicate()`` is true; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def task(i: int, stream: str = "in") -> TaskModel:
    """``Partition i`` of ``kafka.<stream>``."""
    return TaskModel(f"Partition {i}", frozenset({SystemStreamPartition("kafka", stream, i)}), i)


def model(
    version: int, owners: Mapping[str, list[int]], *, location: str = "loc-{}", stream: str = "in"
) -> JobModel:
    """A job model giving each processor of ``owners`` the tasks numbered there (its location:
    ``location`` with the processor id)."""
    containers = {
        pid: ContainerModel(
            pid,
            location.format(pid),
            FrozenMap({task(i, stream).name: task(i, stream) for i in ids}),
        )
        for pid, ids in owners.items()
    }
    return JobModel(version, FrozenMap(containers))
