"""Executor side of the pinned shuffle: one shuffle partition is one task's micro-batch, Arrow
in and Arrow out (the function ``mapInArrow`` runs).

Partition i of the pinned shuffle holds the rows of task ``tasks[i]``, each with its key group
(``_affinity_group``, computed on the executors before the shuffle). :class:`PinnedTaskRunner`:

1. reads the partition's Arrow batches; with an event-time column, notes the largest event time
   and drops the late rows when the operator drops them (:mod:`.eventtime`); sorts the rows by
   key group and key, and cuts them into one run per key (nulls and NaN are the same key, as in
   the key's JSON text);
2. runs the task's batch as :func:`locality.spark.state.runner.run_task_batch` does (state from
   memory, the host's local copy or a restore; the function per key; timeouts; a checkpoint);
3. yields the output rows as Arrow batches of the output schema, then one row more carrying the
   task's :class:`TaskResult` as JSON in the column ``_affinity_result`` (null in output rows):
   its checkpoint, its largest event time and late rows dropped. The driver collects only those
   rows: one per task (the next watermark is computed from them, never from the batch's rows).

The output is checked against the output schema (each column converted to its Arrow type)
*before* anything is checkpointed or delivered: output that does not fit fails the task naming
the column, the expected and the found type, and nothing of it is written anywhere. It refuses
to run a batch this driver committed already (a DataFrame handed to the sink, used again after
the commit, would otherwise do the batch's work again). Imports pandas and pyarrow lazily (they
are on the executors for ``mapInArrow``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from locality.spark.state.durable import commit_exists
from locality.spark.state.eventtime import Watermark, drop_late, scan
from locality.spark.state.runner import (
    QuerySpec,
    StatefulFunctionError,
    TaskBatch,
    TaskOutcome,
    run_task_batch,
)

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

__all__ = [
    "GROUP_COLUMN",
    "INITIAL_COLUMN",
    "INITIAL_PREFIX",
    "RESULT_COLUMN",
    "TASK_COLUMN",
    "PinnedTaskRunner",
    "StaleBatchError",
    "TaskResult",
    "key_runs",
]

#: The columns the driver adds before the shuffle: the task's index, the key group.
TASK_COLUMN = "_affinity_task"
GROUP_COLUMN = "_affinity_group"
#: The column of the output that carries each task's result (null in output rows).
RESULT_COLUMN = "_affinity_result"
#: The marker of an initial-state row (true; null in the batch's rows) and the prefix of the
#: initial state's own columns in the stage (:mod:`coordinator.streaming.initial_state`).
INITIAL_COLUMN = "_affinity_initial"
INITIAL_PREFIX = "_affinity_init__"


class StaleBatchError(RuntimeError):
    """A task of a batch that is committed already was asked to run again."""


@dataclass(frozen=True)
class TaskResult:
    """What a task of the pinned stage did, where, and its checkpoint token (no rows)."""

    task: str
    token: str
    key_groups: tuple[int, ...]
    source: str  # memory | local | restored | new
    bytes_restored: int
    bytes_written: int
    keys_called: int
    timed_out: int
    rows_in: int
    rows_out: int
    executor_id: str | None
    host: str | None
    attempt: int
    seconds: float
    heads: Mapping[int, str] = field(default_factory=dict)  # key group -> its chain's head
    max_event_ms: int | None = None  # the largest event time the task read (None: none)
    late_rows: int = 0  # rows dropped as late (older than the watermark)

    @property
    def warm(self) -> bool:
        return self.source in ("memory", "local")

    def to_json(self) -> str:
        document = asdict(self)
        document["heads"] = {str(g): h for g, h in self.heads.items()}
        return json.dumps(document, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> TaskResult:
        document = json.loads(text)
        document["key_groups"] = tuple(document["key_groups"])
        document["heads"] = {int(g): str(h) for g, h in document.get("heads", {}).items()}
        return cls(**document)

    @classmethod
    def of(
        cls,
        outcome: TaskOutcome,
        rows_in: int,
        where: tuple[str | None, str | None, int],
        seconds: float,
        event: tuple[int | None, int] = (None, 0),
    ) -> TaskResult:
        """``event``: (the largest event time read, late rows dropped)."""
        executor_id, host, attempt = where
        return cls(
            task=outcome.task,
            token=outcome.token,
            key_groups=tuple(outcome.key_groups),
            source=outcome.source,
            bytes_restored=outcome.bytes_restored,
            bytes_written=outcome.bytes_written,
            keys_called=outcome.keys_called,
            timed_out=outcome.timed_out,
            rows_in=rows_in,
            rows_out=len(outcome.output),
            executor_id=executor_id,
            host=host,
            attempt=attempt,
            seconds=seconds,
            heads=dict(outcome.heads),
            max_event_ms=event[0],
            late_rows=event[1],
        )


@dataclass(frozen=True)
class PinnedTaskRunner:
    """The ``mapInArrow`` function of one batch's pinned stage (pickled once to the executors)."""

    spec: QuerySpec
    tasks: tuple[str, ...]  # partition index -> task
    batch: int
    start_batch: int  # the committed batch the state starts from (-1: none)
    tokens: Mapping[str, str]  # that commit's token per task
    key_groups: Mapping[str, tuple[int, ...]]
    batch_time_ms: int
    input_columns: tuple[str, ...]  # the stream's own columns, as the function gets them
    output_schema: pa.Schema  # the output columns (nullable) and RESULT_COLUMN
    heads: Mapping[int, str] | None = None  # the start commit's chain heads (None: format 1)
    epoch: int = 0  # the driver epoch running the batch (its commit record's name)
    watermark: Watermark | None = None  # the batch's watermarks (None: no event-time column)
    # Where a task's rows come from: None, the shuffle partition it runs on; else a function of
    # the task giving its rows (the function's columns and GROUP_COLUMN), e.g. its Kafka ranges.
    source: Callable[[str], pa.Table] | None = None
    # Where a task's output goes besides the stage's rows: None, nowhere; else a function of
    # (task, batch, output rows, attempt token) that writes them (e.g. to a Kafka topic, or kept
    # with the checkpoint to be published after the commit) before the task ends.
    deliver: Callable[[str, int, pd.DataFrame, str], int] | None = None
    # The initial state's columns when its rows come with the batch's (INITIAL_COLUMN true,
    # its columns under INITIAL_PREFIX): handleInitialState gets them; () without.
    initial_columns: tuple[str, ...] = ()

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from pyspark import TaskContext

        from locality.spark.provider import (
            SparkExecutorLocationIdProvider,
            current_executor_host,
            current_executor_id,
        )

        began = time.perf_counter()
        context = TaskContext.get()
        index = context.partitionId() if context is not None else 0
        attempt = context.attemptNumber() if context is not None else 0
        task = self.tasks[index]
        if commit_exists(self.spec.store.storage, self.batch, self.epoch):
            raise StaleBatchError(
                f"batch {self.batch} is committed already: a DataFrame given to the sink is "
                "valid only during the sink call (its rows were computed for that call)"
            )
        received = list(batches)
        table: pa.Table | None
        if self.source is not None:
            table = self.source(task)
            columns = tuple(c for c in table.column_names if c not in (GROUP_COLUMN, TASK_COLUMN))
        else:
            table = pa.Table.from_batches(received) if received else None
            columns = self.input_columns
        table, initial = self._split_initial(table)
        table, event = self._event_time(table)
        rows = key_runs(table, self.spec.key_columns, columns)
        work = TaskBatch(
            task=task,
            batch=self.batch,
            start_batch=self.start_batch,
            token=self.tokens.get(task),
            key_groups=self.key_groups[task],
            batch_time_ms=self.batch_time_ms,
            rows=tuple(rows),
            heads=self.heads,
            watermark_ms=self.watermark.current_ms if self.watermark is not None else None,
            initial=tuple(initial),
        )
        location = SparkExecutorLocationIdProvider().location_id()
        outcome = run_task_batch(self.spec, work, location, prepare=self._output_table)
        if self.deliver is not None:
            self.deliver(task, self.batch, outcome.output, outcome.token)
        yield from self._output(outcome.prepared)
        rows_in = sum(len(frame) for _, _, frame in rows)
        where = (current_executor_id(), current_executor_host(), attempt)
        result = TaskResult.of(outcome, rows_in, where, time.perf_counter() - began, event)
        yield self._result_batch(result)

    def _split_initial(
        self, table: pa.Table | None
    ) -> tuple[pa.Table | None, list[tuple[int, tuple[Any, ...], pd.DataFrame]]]:
        """The batch's rows, and the initial state's per key (with its own column names)."""
        import pyarrow.compute as pc

        if not self.initial_columns or table is None:
            return table, []
        marked = pc.fill_null(table.column(INITIAL_COLUMN), False)
        prefixed = [INITIAL_PREFIX + c for c in self.initial_columns]
        runs = key_runs(table.filter(marked), self.spec.key_columns, prefixed)
        for _, _, frame in runs:
            frame.columns = list(self.initial_columns)
        return table.filter(pc.invert(marked)), runs

    def _event_time(self, table: pa.Table | None) -> tuple[pa.Table | None, tuple[int | None, int]]:
        """The task's rows without the late ones if the operator drops them, and (the largest
        event time read, late rows dropped); the rows as they are without event time."""
        event_time = self.spec.event_time
        if event_time is None or self.watermark is None:
            return table, (None, 0)
        largest = scan(table, event_time.column)
        if not self.spec.drops_late_rows:
            return table, (largest, 0)
        kept, late = drop_late(table, event_time.column, self.watermark)
        return kept, (largest, late)

    def _output_table(self, frame: pd.DataFrame) -> pa.Table | None:
        """The output as an Arrow table of the output schema (None: no rows), checked column by
        column before any side effect (module docstring)."""
        import pyarrow as pa

        if not len(frame):
            return None
        user = pa.schema([f for f in self.output_schema if f.name != RESULT_COLUMN])
        columns = []
        for field_ in user:
            values = frame[field_.name]
            try:
                columns.append(pa.array(values, type=field_.type, from_pandas=True))
            except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError, TypeError, OverflowError):
                raise StatefulFunctionError(
                    f"batch {self.batch}: the function's output does not fit output_schema: "
                    f"column {field_.name!r} should be {field_.type}, found "
                    f"{_found_type(values)}; nothing of the batch was written"
                ) from None
        table = pa.Table.from_arrays(columns, schema=user)
        return table.append_column(RESULT_COLUMN, pa.nulls(table.num_rows, pa.string()))

    def _output(self, table: pa.Table | None) -> Iterator[pa.RecordBatch]:
        if table is not None:
            yield from table.to_batches()

    def _result_batch(self, result: TaskResult) -> pa.RecordBatch:
        import pyarrow as pa

        columns = [
            pa.array([result.to_json()], pa.string())
            if field.name == RESULT_COLUMN
            else pa.nulls(1, field.type)
            for field in self.output_schema
        ]
        return pa.RecordBatch.from_arrays(columns, schema=self.output_schema)


def _found_type(values: pd.Series) -> str:
    """What a column holds: its dtype, and for objects the first value that is not null."""
    if str(values.dtype) != "object":
        return str(values.dtype)
    for value in values:
        if value is not None:
            return f"{type(value).__name__} ({value!r:.40})"
    return "object"


def key_runs(
    table: pa.Table | None, key_columns: Sequence[str], input_columns: Sequence[str]
) -> list[tuple[int, tuple[Any, ...], pd.DataFrame]]:
    """(key group, key, the key's rows with ``input_columns``) per key of ``table``, keys in
    (key group, key) order; a key's values as Python values (``None`` for null and NaN)."""
    import numpy as np
    import pyarrow.compute as pc

    from locality.spark.state.keyspace import key_text

    if table is None or table.num_rows == 0:
        return []
    sort_keys = [(c, "ascending", "at_end") for c in (GROUP_COLUMN, *key_columns)]
    table = table.take(pc.sort_indices(table, sort_keys=sort_keys))
    changed = np.zeros(table.num_rows - 1, dtype=bool)
    for name in (GROUP_COLUMN, *key_columns):
        changed |= _changes(table.column(name).combine_chunks())
    starts = np.concatenate(([0], np.flatnonzero(changed) + 1))
    ends = np.append(starts[1:], table.num_rows)
    groups = table.column(GROUP_COLUMN).take(starts).to_pylist()
    values = [table.column(c).take(starts).to_pylist() for c in key_columns]
    frame = table.select(list(input_columns)).to_pandas()
    runs: dict[tuple[int, str], tuple[tuple[Any, ...], list[pd.DataFrame]]] = {}
    for i, (start, end) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        key = tuple(_python(column[i]) for column in values)
        found = runs.setdefault((int(groups[i]), key_text(key)), (key, []))
        found[1].append(frame.iloc[start:end])
    return [(group, key, _joined(parts)) for (group, _), (key, parts) in runs.items()]


def _changes(column: Any) -> Any:
    """Per row after the first: does ``column`` differ from the row before (nulls equal)?"""
    import numpy as np
    import pyarrow.compute as pc

    current, previous = column.slice(1), column.slice(0, len(column) - 1)
    differs = pc.fill_null(pc.not_equal(current, previous), True)
    both_null = pc.and_(pc.is_null(current), pc.is_null(previous))
    return np.asarray(pc.and_not(differs, both_null).to_numpy(zero_copy_only=False), dtype=bool)


def _python(value: Any) -> Any:
    """NaN as None (the key's JSON text has null for both)."""
    return None if isinstance(value, float) and value != value else value


def _joined(parts: list[pd.DataFrame]) -> pd.DataFrame:
    import pandas as pd

    frame = parts[0] if len(parts) == 1 else pd.concat(parts)
    return frame.reset_index(drop=True)
