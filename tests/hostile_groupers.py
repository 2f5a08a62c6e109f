"""Groupers that misbehave, for the coordinator's hardening tests (issue 15). Importable by
name (the grouper's worker process unpickles them), so they live in a module of their own."""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Collection

from groupers import GrouperMetadata, HostAffinityGrouper
from metadata.model import ContainerModel, FrozenMap, TaskModel


class GilHog:
    """Holds the GIL in one C call (``sum(range(n))``) for ``seconds`` or so, then answers well."""

    def __init__(self, n: int = 3_000_000_000) -> None:
        self.n = n

    def group(self, tasks: Collection[TaskModel], metadata: GrouperMetadata) -> set[ContainerModel]:
        sum(range(self.n))
        return HostAffinityGrouper().group(tasks, metadata)


class Sleeper:
    """Answers well, after ``seconds``."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def group(self, tasks: Collection[TaskModel], metadata: GrouperMetadata) -> set[ContainerModel]:
        time.sleep(self.seconds)
        return HostAffinityGrouper().group(tasks, metadata)


class SlowSecondRun:
    """Answers well; its second run in a worker process (the recheck after the first DONE)
    first sleeps ``seconds``. A fresh worker process starts counting again."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.runs = 0

    def group(self, tasks: Collection[TaskModel], metadata: GrouperMetadata) -> set[ContainerModel]:
        self.runs += 1
        if self.runs == 2:
            time.sleep(self.seconds)
        return HostAffinityGrouper().group(tasks, metadata)


class AllToFirst:
    """Every task to the first processor, at once: a grouper that costs (almost) nothing."""

    def group(self, tasks: Collection[TaskModel], metadata: GrouperMetadata) -> set[ContainerModel]:
        pid = min(metadata.processor_locality)
        location = metadata.processor_locality[pid]
        return {ContainerModel(pid, location, FrozenMap({t.name: t for t in tasks}))}


class Exits:
    """Raises SystemExit (or, with ``hard``, ends its process with exit code 3)."""

    def __init__(self, hard: bool = False) -> None:
        self.hard = hard

    def group(self, tasks: Collection[TaskModel], metadata: GrouperMetadata) -> set[ContainerModel]:
        if self.hard:
            os._exit(3)
        raise SystemExit("grouper gave up")


class ListAsProcessorId:
    """Its good containers plus ``ContainerModel(["x"], "x", {})``: validate() raises TypeError."""

    def group(self, tasks: Collection[TaskModel], metadata: GrouperMetadata) -> object:
        good = HostAffinityGrouper().group(tasks, metadata)
        return [*good, ContainerModel(["x"], "x", {})]  # type: ignore[arg-type]


class RaisingIterable:
    def __len__(self) -> int:
        return 1

    def __iter__(self) -> object:
        raise RuntimeError("iterating the answer failed")


class IterRaises:
    """An answer whose ``__iter__`` raises."""

    def group(self, tasks: Collection[TaskModel], metadata: GrouperMetadata) -> object:
        return RaisingIterable()


class CollectorProbe:
    """Answers whether the cyclic garbage collector ran during its call (not a valid answer:
    the raw value reaches the coordinator, whose leader machine would refuse it)."""

    def group(self, tasks: Collection[TaskModel], metadata: GrouperMetadata) -> object:
        return ("collector enabled", gc.isenabled())
