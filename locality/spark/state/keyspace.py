"""Which task and key group a key belongs to, from the job's task models.

A key (the values of the key columns) is hashed as its canonical JSON text (:func:`key_text`)
with ``groupers.keys.stable_hash`` (by the driver: ``locality`` does not import ``groupers``);
a hash ``h`` goes to stream partition ``(h // f) mod P`` and SEP-32 key bucket ``h mod f`` (``f``
the elasticity factor, ``P`` the input's partitions), so to the virtual task holding that
partition and bucket, and to key group ``h mod max_parallelism``, which lies inside that task
when ``max_parallelism`` is a multiple of ``P x f``. Standard library and ``metadata.model``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from locality.spark.state.schema import to_python
from metadata.model import TaskModel

__all__ = ["KeySpace", "key_text"]


@dataclass(frozen=True)
class KeySpace:
    """Routing: which task and key group a key hash belongs to (see the module docstring)."""

    partitions: int
    factor: int
    max_parallelism: int
    task_of: Mapping[tuple[int, int], str]  # (partition, bucket) -> task

    @classmethod
    def of(cls, tasks: Iterable[TaskModel], partitions: int, max_parallelism: int) -> KeySpace:
        task_of: dict[tuple[int, int], str] = {}
        buckets = 1
        for task in tasks:
            for ssp in task.partitions:
                task_of[ssp.partition, max(ssp.key_bucket, 0)] = task.name
                buckets = max(buckets, ssp.key_bucket + 1)
        factor = 1 << (buckets - 1).bit_length()
        if max_parallelism % (factor * partitions):
            raise ValueError(
                f"state.max_parallelism {max_parallelism} must be a multiple of partitions x "
                f"elasticity factor ({partitions} x {factor}): a key group must lie in one task"
            )
        return cls(partitions, factor, max_parallelism, task_of)

    def route(self, key_hash: int) -> tuple[str, int]:
        """(task, key group) of a key with this hash."""
        partition = (key_hash // self.factor) % self.partitions
        task = self.task_of[partition, key_hash % self.factor]
        return task, key_hash % self.max_parallelism

    def key_groups(self) -> dict[str, tuple[int, ...]]:
        groups: dict[str, list[int]] = {t: [] for t in self.task_of.values()}
        for g in range(self.max_parallelism):
            groups[self.route(g)[0]].append(g)
        return {t: tuple(gs) for t, gs in groups.items()}


def key_text(values: Iterable[Any]) -> str:
    """A key (its column values) as canonical JSON text: what is hashed and stored."""
    return json.dumps([to_python(v) for v in values], separators=(",", ":"))
