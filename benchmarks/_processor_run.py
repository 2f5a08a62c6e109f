"""A ``StatefulProcessor`` run on the object space without Spark, the driver's part in
miniature: the query's spec over a directory, and a batch run by each task then committed.
Shared by ``benchmarks/processor_ttl.py`` and the processor's unit tests."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from locality.spark.state import (
    CommitRecord,
    DirectoryStateStorage,
    QuerySpec,
    StoreSpec,
    TaskBatch,
    TaskOutcome,
    latest_commit,
    parse_schema,
    run_task_batch,
    write_commit,
    write_pending,
)
from locality.spark.state.processor import ProcessorFunction


def processor_spec(
    root: Path,
    processor: Any,
    mode: str,
    max_parallelism: int,
    scope: str = "q",
    rows: bool = False,
) -> QuerySpec:
    """The query of ``processor`` in time mode ``mode`` (checked; ``rows``: the Row-based
    ``transformWithState``), keyed by ``k``, its output ``(k, out)``, its store under ``root``
    (``durable`` and ``local``)."""
    function = ProcessorFunction(processor, mode, rows=rows)
    function.check()
    storage = DirectoryStateStorage(root / "durable", fsync=False)
    return QuerySpec(
        func=function,
        key_columns=("k",),
        output_columns=("k", "out"),
        state_fields=parse_schema("unused long", "state_schema"),
        timeout="NoTimeout",
        store=StoreSpec(storage, str(root / "local"), scope, max_parallelism),
    )


def run_batch(
    spec: QuerySpec,
    batch: int,
    frame: pd.DataFrame,
    tasks: Mapping[str, tuple[int, ...]],
    time_ms: int = 0,
    host: str = "h1",
) -> dict[str, TaskOutcome]:
    """Batch ``batch`` of ``frame``'s rows (key ``k``, an integer: its key group ``k`` modulo
    the maximum parallelism) from the latest commit: each of ``tasks`` (task -> its key groups)
    runs its keys on ``host``, then the batch is committed; each task's outcome."""
    storage = spec.store.storage
    maxp = spec.store.max_parallelism
    start = latest_commit(storage, before=batch)
    time_ms = write_pending(storage, batch, time_ms)
    keys = [(int(k), part.reset_index(drop=True)) for k, part in frame.groupby("k")]
    outcomes = {}
    for task, groups in tasks.items():
        work = TaskBatch(
            task=task,
            batch=batch,
            start_batch=start.batch if start else -1,
            token=start.tokens.get(task) if start else None,
            key_groups=groups,
            batch_time_ms=time_ms,
            rows=tuple((k % maxp, (k,), part) for k, part in keys if k % maxp in groups),
            heads=start.heads if start else {},
        )
        outcomes[task] = run_task_batch(spec, work, host)
    write_commit(storage, CommitRecord.of(batch, outcomes, maxp, start))
    return outcomes
