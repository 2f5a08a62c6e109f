"""One micro-batch of the pinned Kafka source run with no shuffle: the batch's partitions are the
tasks already (``readStream.format("affinity-kafka")``, a job whose tasks own Kafka partitions:
:class:`~coordinator.streaming.kafka_layout.KafkaLayout`). Over one topic without key buckets
each of Kafka's input partitions is a task's; with several co-partitioned topics, key buckets
(elasticity factor f > 1) or ``minPartitions``, the source's option ``affinity.tasksPerPartition``
(f) makes each input partition a task's group (:class:`~locality.spark.kafka_source.PartitionGroup`:
partition p of every topic, every split, key bucket b), placed on the task's executor.

:func:`run_partitioned_stage`:

1. **place**: the driver sets the source's placement (:mod:`locality.spark.kafka_source`): each
   task's Kafka partition prefers the executor the job model gives the task, so the Spark task
   that reads the partition runs there (the scheduler asks when the stage is submitted, after
   Spark planned the batch);
2. **tasks without records**: a task whose partition has nothing new in the batch has no input
   partition; it gets an empty partition of its own, pinned to its executor (``union``: no
   exchange), so every task runs (its timeouts fire, its checkpoint is carried);
3. **run**: each partition's key group is the task's own (a column computed from the partition
   index), and the stage's ``mapInArrow`` of
   :class:`locality.spark.state.pinned_task.PinnedTaskRunner` runs task i on partition i,
   exactly as after the pinned shuffle (:func:`coordinator.streaming.stage.run_placed`).

The rows never leave the executor that read them: no exchange, no shuffle bytes. The state keeps
the key groups of the Kafka layout (task ``Partition p-b-f``: key group ``p x f + b``), as the Kafka
query's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from coordinator.streaming.kafka_layout import KafkaLayout, KafkaLayoutError
from coordinator.streaming.stage import BatchPlan, StageRun, run_placed, stage_schemas, task_runner
from locality.spark.kafka import KafkaPartition
from locality.spark.kafka_source import (
    TASKS_OPTION,
    PartitionGroup,
    SourcePart,
    set_placement,
)
from locality.spark.pinned_shuffle import pin_partitions
from locality.spark.pinning import job_description, resolve_locations
from locality.spark.state import QuerySpec
from locality.spark.state.pinned_task import GROUP_COLUMN

__all__ = ["partition_tasks", "placement", "run_partitioned_stage"]


def partition_tasks(
    layout: KafkaLayout, partitions: Sequence[SourcePart | None]
) -> tuple[str, ...]:
    """The task of each of a batch's Spark partitions (each reads one Kafka partition, or one
    task's group under the source's option ``affinity.tasksPerPartition``), or
    :class:`KafkaLayoutError` saying why the batch's partitions are not the layout's tasks."""
    task_of: dict[SourcePart, str] = {
        PartitionGroup(p, b, layout.factor): t for t, (p, b) in layout.tasks.items()
    }
    if layout.factor == 1 and len(layout.topics) == 1:
        task_of |= {KafkaPartition(layout.topics[0], p): t for t, (p, _) in layout.tasks.items()}
    tasks = [task_of.get(p) if p is not None else None for p in partitions]
    strays = [str(p) for p, t in zip(partitions, tasks, strict=True) if t is None]
    if strays or len(set(tasks)) != len(tasks):
        shown = strays[:4] + ([f"... {len(strays) - 4} more"] if len(strays) > 4 else [])
        raise KafkaLayoutError(
            f"the batch's partitions {shown or 'repeat a Kafka partition'} are not one per task "
            f"of the job ({len(layout.topics)} topic(s) of {layout.partitions} partitions, "
            f"elasticity factor {layout.factor}): read the stream with "
            f'.option("{TASKS_OPTION}", {layout.factor}) (one input partition per task: every '
            "topic's partition p, every minPartitions split, each key bucket)"
        )
    return tuple(t for t in tasks if t is not None)


def placement(layout: KafkaLayout, location: Mapping[str, str]) -> dict[SourcePart, str]:
    """The source's placement from each task's ``location``: its group's key, and without key
    buckets its partition of every topic too (read either way)."""
    placed: dict[SourcePart, str] = {}
    for task, (p, b) in layout.tasks.items():
        placed[PartitionGroup(p, b, layout.factor)] = location[task]
        if layout.factor == 1:
            placed |= {KafkaPartition(topic, p): location[task] for topic in layout.topics}
    return placed


def run_partitioned_stage(
    df: Any,
    spec: QuerySpec,
    layout: KafkaLayout,
    plan: BatchPlan,
    output_schema: Any,
    partitions: Sequence[SourcePart | None],
    *,
    locality_wait: str | None,
    deliver: Callable[..., int] | None = None,
) -> StageRun:
    """Run ``plan``'s batch of ``df`` (partition i reads ``partitions[i]``) with no shuffle (see
    the module docstring); each task hands its output to ``deliver`` too (a Kafka output)."""
    from pyspark.sql import functions as F

    began = time.perf_counter()
    read = partition_tasks(layout, partitions)
    preferred, unplaceable = resolve_locations(plan.placement, plan.tasks, plan.executors)
    location = {task: (preferred[task] or [""])[0] for task in plan.tasks}
    set_placement(df.sparkSession, placement(layout, location))
    idle = tuple(task for task in plan.tasks if task not in read)
    frame = df.union(_empty_partitions(df, [location[t] for t in idle])) if idle else df
    order = (*read, *idle)
    groups = ", ".join(str(plan.key_groups[task][0]) for task in order)
    group = F.expr(f"element_at(array({groups}), spark_partition_id() + 1)")
    struct, arrow_schema = stage_schemas(df.sparkSession, output_schema)
    runner = task_runner(spec, plan, arrow_schema, tuple(df.columns))
    runner = replace(runner, tasks=order, deliver=deliver)
    with job_description(df.sparkSession.sparkContext, f"affinity batch {plan.batch}"):
        return run_placed(
            frame.withColumn(GROUP_COLUMN, group),
            runner,
            struct,
            plan,
            unplaceable,
            began,
            locality_wait=locality_wait,
        )


def _empty_partitions(df: Any, locations: Sequence[str]) -> Any:
    """A DataFrame of ``df``'s schema with one empty partition per location, each pinned there."""
    from pyspark.sql import functions as F

    count = len(locations)
    nothing = df.sparkSession.range(0, count, 1, count).where(F.col("id") < 0)
    typed = nothing.select(*[F.lit(None).cast(f.dataType).alias(f.name) for f in df.schema.fields])
    return pin_partitions(typed, locations)
