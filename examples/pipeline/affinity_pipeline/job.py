"""The reference stateful pipeline: keyed running counts and sums over micro-batches, on Spark.

Each micro-batch is generated on the driver, split into ``num_tasks`` tasks by key, and run as
one Spark stage with one Spark task per affinity task (:func:`locality.spark.run_pinned`). The
placement (task -> executor id or host) is the caller's: a job model's (see
``benchmarks/spark_affinity.py``) or none at all (Spark's default placement).

On the executor, :func:`process_task` finds the task's state (warm from the local store of the
executor's location, else cold from the checkpoint: :mod:`affinity_pipeline.store`), applies the
batch, checkpoints, and returns the output rows with where it ran and what it restored.

The driver commits batch ``b`` (``<checkpoint_dir>/_driver.json``) once every task has
checkpointed it, so a new :class:`StatefulPipeline` (after an application restart) carries on at
the next batch, and a batch that failed half-way is simply run again: the outputs are a function
of the batch number and the checkpoints alone, whatever ran where.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from affinity_pipeline.events import (
    Output,
    PipelineConfig,
    apply_events,
    generate_batch,
    merge_outputs,
    split_by_task,
)
from affinity_pipeline.store import Status, TaskStore
from locality.spark import (
    EXECUTOR_LOCATION_ENV,
    SparkExecutor,
    SparkExecutorLocationIdProvider,
    current_executor_id,
    run_pinned,
)

if TYPE_CHECKING:
    from pyspark import SparkContext

__all__ = ["BatchReport", "StatefulPipeline", "TaskOutcome", "TaskInput", "process_task"]

DRIVER_FILE = "_driver.json"


@dataclass(frozen=True)
class TaskInput:
    """What the driver sends one task for one batch."""

    config: PipelineConfig
    batch: int
    events: tuple[tuple[str, int], ...]
    location_env: str = EXECUTOR_LOCATION_ENV


@dataclass(frozen=True)
class TaskOutcome:
    """What one task did in one batch."""

    task: str
    batch: int
    status: Status
    bytes_restored: int
    checkpoint_bytes: int
    location: str
    executor_id: str | None
    outputs: tuple[Output, ...]
    seconds: float


def process_task(task: str, payload: TaskInput) -> TaskOutcome:
    """Run one task for one batch (on an executor): load, apply, checkpoint, report."""
    start = time.perf_counter()
    config = payload.config
    location = SparkExecutorLocationIdProvider(payload.location_env).location_id()
    store = TaskStore(
        task,
        local_store_dir=config.local_store_dir,
        checkpoint_dir=config.checkpoint_dir,
        location=location,
    )
    loaded = store.load(payload.batch - 1)
    state = loaded.state
    before = {key: list(value) for key, value in state.items()}
    outputs = apply_events(state, payload.events)
    if config.task_delay_s > 0:
        time.sleep(config.task_delay_s)
    size = store.save(payload.batch, state, before)
    return TaskOutcome(
        task=task,
        batch=payload.batch,
        status=loaded.status,
        bytes_restored=loaded.bytes_restored,
        checkpoint_bytes=size,
        location=location,
        executor_id=current_executor_id(),
        outputs=tuple(outputs),
        seconds=time.perf_counter() - start,
    )


@dataclass(frozen=True)
class BatchReport:
    """One batch: per task outcome, and the figures the benchmark compares."""

    batch: int
    outcomes: Mapping[str, TaskOutcome]
    seconds: float
    pinned_ok: int
    pinned_total: int
    placement: Mapping[str, str] = field(default_factory=dict)

    def count(self, status: Status) -> int:
        return sum(1 for o in self.outcomes.values() if o.status == status)

    @property
    def warm(self) -> int:
        return self.count("warm")

    @property
    def cold(self) -> int:
        return self.count("cold")

    @property
    def warm_ratio(self) -> float:
        """warm / (warm + cold); 1.0 when every task was new (batch 0)."""
        known = self.warm + self.cold
        return self.warm / known if known else 1.0

    @property
    def bytes_restored(self) -> int:
        return sum(o.bytes_restored for o in self.outcomes.values())

    @property
    def outputs(self) -> list[Output]:
        """Every output row of the batch, sorted by key (compare with the reference)."""
        return merge_outputs({t: o.outputs for t, o in self.outcomes.items()})

    @property
    def task_locality(self) -> dict[str, str]:
        """Task -> location id it ran at (what the processors write as task locality)."""
        return {t: o.location for t, o in self.outcomes.items()}

    @property
    def ran_on(self) -> dict[str, str | None]:
        """Task -> executor id it ran on."""
        return {t: o.executor_id for t, o in self.outcomes.items()}


def _atomic_write_json(path: Path, document: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as handle:
        json.dump(document, handle)
    os.replace(tmp, path)


class StatefulPipeline:
    """The driver of the pipeline on one SparkContext; survives application restarts through
    ``config.checkpoint_dir`` (make a new one on the new context)."""

    def __init__(
        self,
        sc: SparkContext,
        config: PipelineConfig,
        *,
        locality_wait: str | None = "30s",
        location_env: str = EXECUTOR_LOCATION_ENV,
        name: str = "pipeline",
    ) -> None:
        self.sc = sc
        self.config = config
        self.locality_wait = locality_wait
        self.location_env = location_env
        self.name = name
        self._driver_file = Path(config.checkpoint_dir) / DRIVER_FILE

    @property
    def committed_batch(self) -> int:
        """The last batch every task checkpointed (-1: none)."""
        try:
            document = json.loads(self._driver_file.read_text())
        except FileNotFoundError:
            return -1
        if document.get("config") != self.config.to_dict():
            raise ValueError(f"{self._driver_file} belongs to another pipeline configuration")
        return int(document["committed"])

    @property
    def next_batch(self) -> int:
        return self.committed_batch + 1

    def run_batch(
        self,
        placement: Mapping[str, str] | None = None,
        *,
        executors: Sequence[SparkExecutor] | None = None,
    ) -> BatchReport:
        """Run the next batch with ``placement`` (task -> executor id or host; None or empty:
        Spark's default placement) and commit it."""
        batch = self.next_batch
        start = time.perf_counter()
        by_task = split_by_task(generate_batch(batch, self.config), self.config.num_tasks)
        inputs = {
            task: TaskInput(self.config, batch, tuple(events), self.location_env)
            for task, events in by_task.items()
        }
        run = run_pinned(
            self.sc,
            inputs,
            dict(placement or {}),
            process_task,
            locality_wait=self.locality_wait if placement else None,
            executors=executors,
            description=f"{self.name}: batch {batch}",
        )
        _atomic_write_json(self._driver_file, {"committed": batch, "config": self.config.to_dict()})
        return BatchReport(
            batch=batch,
            outcomes=run.results,
            seconds=time.perf_counter() - start,
            pinned_ok=run.pinned_ok,
            pinned_total=run.total,
            placement=dict(placement or {}),
        )
