"""The pipeline's input and its single-process reference.

Micro-batch ``b`` is ``events_per_batch`` events ``(key, value)`` drawn by a generator seeded with
``(seed, b)`` alone, so every process (driver, executor, reference) sees the same batch. Keys are
split into ``num_tasks`` tasks by a stable hash (``zlib.crc32``, not Python's salted ``hash()``);
task ``i`` is named ``Partition i``, as the ``group-by-partition`` SSP grouper names the tasks of
an input with ``num_tasks`` partitions.

The state of a task is ``{key: [count, sum]}``; a batch's output is, for each key the batch
touched, ``(key, count, sum)`` after the batch, sorted by key.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import asdict, dataclass

__all__ = [
    "INPUT_STREAM",
    "INPUT_SYSTEM",
    "Output",
    "PipelineConfig",
    "apply_events",
    "generate_batch",
    "merge_outputs",
    "reference_outputs",
    "split_by_task",
    "task_name",
    "task_names",
    "task_of_key",
]

#: The input as a StreamInput (``metadata.model.StreamInput(INPUT_SYSTEM, INPUT_STREAM, n)``).
INPUT_SYSTEM = "generated"
INPUT_STREAM = "events"

#: One output row: (key, running count, running sum).
Output = tuple[str, int, int]


@dataclass(frozen=True)
class PipelineConfig:
    """Everything a task needs to know; plain values only (it travels to the executors).

    ``local_store_dir``: root of the executors' local stores (one folder per location below it,
    then one per task). ``checkpoint_dir``: the durable checkpoints (one folder per task).
    ``task_delay_s``: extra work per task and batch (a sleep; tests use it to kill an executor
    while a batch runs).
    """

    local_store_dir: str
    checkpoint_dir: str
    num_tasks: int = 12
    num_keys: int = 600
    events_per_batch: int = 2000
    seed: int = 7
    max_value: int = 1000
    task_delay_s: float = 0.0

    def __post_init__(self) -> None:
        if self.num_tasks < 1 or self.num_keys < 1 or self.events_per_batch < 0:
            raise ValueError("num_tasks and num_keys must be >= 1, events_per_batch >= 0")

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def task_name(index: int) -> str:
    return f"Partition {index}"


def task_names(num_tasks: int) -> list[str]:
    return [task_name(i) for i in range(num_tasks)]


def task_of_key(key: str, num_tasks: int) -> str:
    """The task that owns ``key``: ``Partition <crc32(key) mod num_tasks>``."""
    return task_name(zlib.crc32(key.encode()) % num_tasks)


def generate_batch(batch: int, config: PipelineConfig) -> list[tuple[str, int]]:
    """The events of micro-batch ``batch``: deterministic in ``(config.seed, batch)``."""
    if batch < 0:
        raise ValueError(f"batch must be >= 0, got {batch}")
    rng = random.Random(config.seed * 1_000_003 + batch)
    width = len(str(config.num_keys - 1))
    return [
        (f"key-{rng.randrange(config.num_keys):0{width}d}", rng.randint(1, config.max_value))
        for _ in range(config.events_per_batch)
    ]


def split_by_task(
    events: Iterable[tuple[str, int]], num_tasks: int
) -> dict[str, list[tuple[str, int]]]:
    """Events by task, every task present (a task with no events still advances a batch)."""
    by_task: dict[str, list[tuple[str, int]]] = {name: [] for name in task_names(num_tasks)}
    for key, value in events:
        by_task[task_of_key(key, num_tasks)].append((key, value))
    return by_task


def apply_events(
    state: MutableMapping[str, list[int]], events: Iterable[tuple[str, int]]
) -> list[Output]:
    """Fold ``events`` into ``state`` (in order); the output rows of the touched keys."""
    touched = set()
    for key, value in events:
        entry = state.setdefault(key, [0, 0])
        entry[0] += 1
        entry[1] += value
        touched.add(key)
    return sorted((key, state[key][0], state[key][1]) for key in touched)


def reference_outputs(config: PipelineConfig, batches: Iterable[int]) -> dict[int, list[Output]]:
    """The single-process reference: batch -> every output row of that batch, sorted by key.

    ``batches`` must start at 0 and be consecutive (the state runs through them in order).
    """
    state: dict[str, list[int]] = {}
    outputs: dict[int, list[Output]] = {}
    for expected, batch in enumerate(batches):
        if batch != expected:
            raise ValueError(f"batches must be 0, 1, 2, ...; got {batch} at position {expected}")
        outputs[batch] = apply_events(state, generate_batch(batch, config))
    return outputs


def merge_outputs(per_task: Mapping[str, Iterable[Output]]) -> list[Output]:
    """All tasks' rows of one batch, sorted by key (comparable with :func:`reference_outputs`)."""
    return sorted(row for rows in per_task.values() for row in rows)
