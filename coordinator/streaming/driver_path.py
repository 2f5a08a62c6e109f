"""The former data path, kept only to be measured against (``data_path="driver"``): the batch's
rows are collected to the driver (``toPandas``), routed to their task there
(:class:`locality.spark.state.keyspace.KeySpace`), shipped to the pinned tasks inside their
payloads (:func:`locality.spark.run_pinned`), and the output comes back through the driver
(``createDataFrame``). The driver's memory grows with the batch; the default path
(:mod:`coordinator.streaming.stage`) never touches the rows. Both route a key to the same task
and key group, so either reads the other's state.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from coordinator.streaming.stage import BatchPlan, StageRun
from groupers.keys import stable_hash
from locality.spark import run_pinned
from locality.spark.state import QuerySpec, TaskBatch
from locality.spark.state.keyspace import KeySpace, key_text
from locality.spark.state.pinned_task import TaskResult
from locality.spark.state.runner import run_on_executor

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["run_driver_stage", "task_batches"]


def run_driver_stage(
    df: Any,
    spec: QuerySpec,
    keyspace: KeySpace,
    plan: BatchPlan,
    output_schema: Any,
    *,
    locality_wait: str | None,
) -> StageRun:
    """Run ``plan``'s batch of ``df`` with the rows through the driver (module docstring)."""
    import pandas as pd

    rows = df.toPandas()
    work = task_batches(spec, keyspace, rows, plan)
    payloads = {task: (spec, w) for task, w in work.items()}
    run = run_pinned(
        df.sparkSession.sparkContext,
        payloads,
        plan.placement,
        run_on_executor,
        locality_wait=locality_wait,
        executors=plan.executors,
        description=f"affinity batch {plan.batch} (driver path)",
    )
    results = {}
    for task, ran in run.tasks.items():
        rows_in = sum(len(frame) for _, _, frame in work[task].rows)
        where = (ran.executor_id, ran.host, ran.attempt)
        results[task] = TaskResult.of(ran.result, rows_in, where, ran.seconds)
    frames = [ran.result.output for _, ran in sorted(run.tasks.items()) if len(ran.result.output)]
    spark = df.sparkSession
    if frames:
        output = spark.createDataFrame(pd.concat(frames, ignore_index=True), output_schema)
    else:
        output = spark.createDataFrame([], output_schema)
    return StageRun(output=output, results=results, run=run, driver_rows=len(rows) + output.count())


def task_batches(
    spec: QuerySpec, keyspace: KeySpace, rows: pd.DataFrame, plan: BatchPlan
) -> dict[str, TaskBatch]:
    """Every task's part of the batch (tasks without rows too: timeouts, local copies)."""
    per_task: dict[str, list[tuple[int, tuple[Any, ...], Any]]] = {t: [] for t in plan.tasks}
    if len(rows):
        keys = list(zip(*(rows[c] for c in spec.key_columns), strict=True))
        rows = rows.assign(_affinity_key=[key_text(k) for k in keys])
        for text, part in rows.groupby("_affinity_key", sort=True):
            task, group = keyspace.route(stable_hash(str(text)))
            key = tuple(json.loads(str(text)))
            per_task[task].append((group, key, part.drop(columns="_affinity_key")))
    start = plan.start
    return {
        task: TaskBatch(
            task=task,
            batch=plan.batch,
            start_batch=start.batch if start is not None else -1,
            token=start.tokens.get(task) if start is not None else None,
            key_groups=plan.key_groups[task],
            batch_time_ms=plan.batch_time_ms,
            rows=tuple(parts),
            heads=start.heads if start is not None else {},
        )
        for task, parts in per_task.items()
    }
