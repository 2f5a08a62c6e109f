"""One micro-batch's pinned stage: the batch's rows go from the source's partitions to the task
that owns their key in one shuffle between executors, and each task runs on the executor its
job model names. Nothing of the batch passes through the driver.

:func:`run_pinned_stage`:

1. **route** (:mod:`coordinator.streaming.routing`): two columns computed on the executors, the
   task index and the key group of each row;
2. **shuffle, pinned** (:func:`locality.spark.pinned_shuffle.pinned_shuffle`): partition i holds
   task i's rows and prefers task i's executor;
3. **run**: the partitions sorted by key group and key (Spark's sort, which spills to disk),
   then ``mapInArrow`` of :class:`locality.spark.state.pinned_task.PinnedTaskRunner` (both
   narrow: the pin holds): per task, its state opened, the function called per key as the rows
   stream in, the batch checkpointed; it yields its output rows and one row with its
   :class:`TaskResult`;
4. **materialise once**: the stage's output is persisted on the executors, and one action
   (under the locality wait) collects only the result rows: one per task, the checkpoint tokens
   the commit needs.

The sink then gets :attr:`StageRun.output`, the persisted output rows (read on the executors,
where they were produced); :meth:`StageRun.release` drops them after the commit. An executor
lost before the sink read its rows makes Spark compute those tasks again (the same rows: a
batch's output is deterministic), before the commit.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from coordinator.streaming.initial_state import InitialState, with_initial_rows
from coordinator.streaming.routing import routed
from locality.spark import SparkExecutor
from locality.spark.pinned_shuffle import pinned_shuffle
from locality.spark.pinning import LocalityWait, PinnedRun, job_description, pinned_run
from locality.spark.state import CommitRecord, QuerySpec, Watermark
from locality.spark.state.keyspace import KeySpace
from locality.spark.state.pinned_task import (
    GROUP_COLUMN,
    RESULT_COLUMN,
    TASK_COLUMN,
    PinnedTaskRunner,
    TaskResult,
)

__all__ = [
    "STREAM_ROWS_CONF",
    "BatchPlan",
    "StageRun",
    "run_pinned_stage",
    "run_placed",
    "run_stage",
    "sorted_by_key",
    "stage_schemas",
    "task_runner",
]

#: A Spark conf: the rows a task may read in one table (sorted in its Python worker: fast, its
#: memory grows with them); a batch whose tasks may read more, or an unknown number, streams them
#: (Spark sorts each partition, which spills; the worker holds a key's rows at a time). 0: every
#: batch streams.
STREAM_ROWS_CONF = "spark.affinity.task.streamRows"
#: Its default.
STREAM_ROWS = 1_000_000


def streams_rows(task_rows: int | None, threshold: int) -> bool:
    """Whether a batch's tasks stream their rows, when a task may read ``task_rows`` (None:
    nothing says how many) and ``threshold`` is :data:`STREAM_ROWS_CONF`."""
    return task_rows is None or task_rows > threshold


@dataclass(frozen=True)
class BatchPlan:
    """What the driver decided for one batch before its tasks run."""

    batch: int
    batch_time_ms: int
    start: CommitRecord | None  # the commit the batch starts from
    key_groups: Mapping[str, tuple[int, ...]]  # task -> its key groups
    placement: Mapping[str, str]  # task -> executor id
    executors: Sequence[SparkExecutor]  # live when the batch started
    epoch: int = 0  # the driver epoch running it (its commit record carries it)
    watermark: Watermark | None = None  # from the start commit (None: no event-time column)
    task_rows: int | None = None  # the most rows a task may read (None: unknown)

    @property
    def tasks(self) -> tuple[str, ...]:
        return tuple(sorted(self.key_groups))


@dataclass
class StageRun:
    """A batch's tasks, run: the output for the sink, each task's result, where they ran."""

    output: Any  # DataFrame of the output rows
    results: dict[str, TaskResult]
    run: PinnedRun[Any]
    driver_rows: int  # the batch's rows through the driver, in and out (not the result rows)
    cached: Any = None  # the persisted stage output (released after the commit)

    def release(self) -> None:
        if self.cached is not None:
            self.cached.unpersist()
            self.cached = None


def stage_schemas(spark: Any, output_schema: Any) -> tuple[Any, Any]:
    """(Spark StructType, Arrow schema) of the stage's output: the output schema's fields, all
    nullable (a task's result row has no output values), then :data:`RESULT_COLUMN`."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StringType, StructField, StructType, _parse_datatype_string

    declared = output_schema
    if isinstance(declared, str):
        declared = _parse_datatype_string(declared)
    fields = [StructField(f.name, f.dataType, True) for f in declared.fields]
    struct = StructType([*fields, StructField(RESULT_COLUMN, StringType(), True)])
    if "timezone" not in inspect.signature(to_arrow_schema).parameters:
        return struct, to_arrow_schema(struct)  # pyspark 3.5: timestamps in UTC, no argument
    timezone = spark.conf.get("spark.sql.session.timeZone")
    return struct, to_arrow_schema(struct, timezone=timezone)


def task_runner(
    spec: QuerySpec, plan: BatchPlan, arrow_schema: Any, input_columns: tuple[str, ...]
) -> PinnedTaskRunner:
    """The ``mapInArrow`` function of ``plan``'s batch (its rows: the shuffle partition)."""
    return PinnedTaskRunner(
        spec=spec,
        tasks=plan.tasks,
        batch=plan.batch,
        start_batch=plan.start.batch if plan.start is not None else -1,
        tokens=dict(plan.start.tokens) if plan.start is not None else {},
        heads=_start_heads(plan),
        epoch=plan.epoch,
        key_groups=dict(plan.key_groups),
        batch_time_ms=plan.batch_time_ms,
        input_columns=input_columns,
        output_schema=arrow_schema,
        watermark=plan.watermark,
    )


def _start_heads(plan: BatchPlan) -> dict[int, str] | None:
    """The chain heads the batch's tasks load (empty: nothing committed; None: a format 1
    commit, loaded by batch)."""
    if plan.start is None:
        return {}
    return None if plan.start.heads is None else dict(plan.start.heads)


def run_pinned_stage(
    df: Any,
    spec: QuerySpec,
    keyspace: KeySpace,
    plan: BatchPlan,
    output_schema: Any,
    *,
    locality_wait: str | None,
    deliver: Callable[..., int] | None = None,
    initial: InitialState | None = None,
) -> StageRun:
    """Run ``plan``'s batch of ``df`` as one pinned stage (see the module docstring); each task
    hands its output to ``deliver`` too (a Kafka output:
    :mod:`coordinator.streaming.kafka_output`); ``initial``: an initial state whose rows go to
    their keys' tasks with the batch's (:mod:`coordinator.streaming.initial_state`)."""
    struct, arrow_schema = stage_schemas(df.sparkSession, output_schema)
    runner = replace(task_runner(spec, plan, arrow_schema, tuple(df.columns)), deliver=deliver)
    if initial is not None:
        df = with_initial_rows(df, initial, spec.key_columns)
        runner = replace(runner, initial_columns=initial.columns)
    with job_description(df.sparkSession.sparkContext, f"affinity batch {plan.batch}"):
        frame = routed(df, keyspace, spec.key_columns, plan.tasks)
        return run_stage(frame, runner, struct, plan, locality_wait=locality_wait)


def run_stage(
    frame: Any,
    runner: PinnedTaskRunner,
    struct: Any,
    plan: BatchPlan,
    *,
    locality_wait: str | None,
) -> StageRun:
    """Steps 2 to 4 of the module docstring: ``frame`` (with :data:`TASK_COLUMN`) shuffled and
    pinned, ``runner`` over each task's partition, its output persisted, the results collected."""
    began = time.perf_counter()
    shuffle = pinned_shuffle(frame, TASK_COLUMN, plan.tasks, plan.placement, plan.executors)
    return run_placed(
        shuffle.frame, runner, struct, plan, shuffle.unplaceable, began, locality_wait=locality_wait
    )


def sorted_by_key(frame: Any, key_columns: Sequence[str]) -> Any:
    """``frame`` sorted within each partition by key group and key, a floating-point key's NaN
    as null (one key: :mod:`locality.spark.state.keyruns`). Spark's sort spills to disk; it is
    narrow, so a pinned partition keeps its place and nothing is shuffled."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, FloatType

    types = {f.name: f.dataType for f in frame.schema.fields}
    order = [F.col(GROUP_COLUMN)]
    for name in key_columns:
        column = F.col(f"`{name.replace('`', '``')}`")
        if isinstance(types[name], DoubleType | FloatType):
            column = F.when(F.isnan(column), F.lit(None)).otherwise(column)
        order.append(column)
    return frame.sortWithinPartitions(*order)


def run_placed(
    frame: Any,
    runner: PinnedTaskRunner,
    struct: Any,
    plan: BatchPlan,
    unplaceable: Sequence[str],
    began: float,
    *,
    locality_wait: str | None,
) -> StageRun:
    """``runner`` over each partition of ``frame`` (partition i: task ``runner.tasks[i]``, pinned
    already), its output persisted, the results collected (steps 3 and 4). When a task may read
    more rows than :data:`STREAM_ROWS_CONF` (``plan.task_rows``; unknown: so), the partitions are
    sorted by key group and key first (:func:`sorted_by_key`) and a task's rows stream through
    its Python worker key by key; else each task reads its partition in one table."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    sc = frame.sparkSession.sparkContext
    threshold = int(frame.sparkSession.conf.get(STREAM_ROWS_CONF, str(STREAM_ROWS)))
    in_memory = not streams_rows(plan.task_rows, threshold)
    runner = replace(runner, in_memory=in_memory)
    frame = frame if in_memory else sorted_by_key(frame, runner.spec.key_columns)
    out = frame.mapInArrow(runner, struct).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        with LocalityWait(sc, locality_wait):
            rows = out.where(F.col(RESULT_COLUMN).isNotNull()).select(RESULT_COLUMN).collect()
    except BaseException:
        out.unpersist()
        raise
    results = {r.task: r for r in (TaskResult.from_json(row[0]) for row in rows)}
    if set(results) != set(plan.tasks):
        out.unpersist()
        missing = sorted(set(plan.tasks) - set(results))
        raise RuntimeError(f"batch {plan.batch}: no result from task(s) {missing[:5]}")
    ran = [(t, r, r.executor_id, r.host, r.attempt, r.seconds) for t, r in results.items()]
    run = pinned_run(
        ran, plan.placement, plan.executors, tuple(unplaceable), time.perf_counter() - began
    )
    output = out.where(F.col(RESULT_COLUMN).isNull()).drop(RESULT_COLUMN)
    return StageRun(output=output, results=results, run=run, driver_rows=0, cached=out)
