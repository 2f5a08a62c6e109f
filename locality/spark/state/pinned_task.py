"""Executor side of the pinned shuffle: one shuffle partition is one task's micro-batch, Arrow
in and Arrow out (the function ``mapInArrow`` runs), in memory bounded by the Arrow batch, not
by the partition.

Partition i of the pinned shuffle holds the rows of task ``tasks[i]``, each with its key group
(``_affinity_group``, computed on the executors before the shuffle), sorted by key group and
key by Spark before the task (``sortWithinPartitions``, which spills to disk; narrow, so the pin
holds: :func:`coordinator.streaming.stage.run_placed`). :class:`PinnedTaskRunner`:

1. reads the partition's Arrow batches one by one; with an event-time column, notes the largest
   event time and drops the late rows when the operator drops them (:mod:`.task_stream`); cuts
   them into one run per key as they come, a run going on into the next batch carried over
   (:mod:`.keyruns`: nulls and NaN are the same key, as in the key's JSON text);
2. runs the task's batch as :func:`locality.spark.state.runner.run_task_batch` does (state from
   memory, the host's local copy or a restore; the function per key as its rows arrive;
   timeouts), then checkpoints it;
3. yields the output rows as Arrow batches of the output schema while the function produces
   them (every ~10,000 rows), then one row more carrying the task's :class:`TaskResult` as JSON
   in the column ``_affinity_result`` (null in output rows): its checkpoint, its largest event
   time and late rows dropped. The driver collects only those rows: one per task (the next
   watermark is computed from them, never from the batch's rows).

Every output chunk is checked against the output schema (each column converted to its Arrow
type) as it is produced, and the checkpoint and the delivery (``deliver``, a Kafka output) come
only after the last: output that does not fit fails the task naming the column, the expected
and the found type, and nothing of the batch is checkpointed or delivered. Output batches
yielded before a failure go nowhere: Spark keeps a task's output only when the task succeeds
(the stage's output is persisted block by block, a failed task's block is discarded and the
task run again). It refuses to run a batch this driver committed already (a DataFrame handed to
the sink, used again after the commit, would otherwise do the batch's work again). A task run
``in_memory`` (a task expected to read few rows, or the way before the JVM sort, kept to
measure it) sorts its whole partition in memory. Imports pandas and
pyarrow lazily (they are on the executors for ``mapInArrow``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from locality.spark.state.durable import commit_exists
from locality.spark.state.eventtime import Watermark
from locality.spark.state.keyruns import (
    GROUP_COLUMN,
    KeyRun,
    key_runs,
    sort_rows,
    stream_key_runs,
)
from locality.spark.state.runner import (
    QuerySpec,
    StatefulFunctionError,
    TaskBatch,
    TaskOutcome,
    finish_task_batch,
    task_steps,
)
from locality.spark.state.task_stream import CheckedOutput, CountedRuns, EventScan

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
        rows_out: int | None = None,
    ) -> TaskResult:
        """``event``: (the largest event time read, late rows dropped); ``rows_out``: the output
        rows (None: the outcome's output, all of it)."""
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
            rows_out=len(outcome.output) if rows_out is None else rows_out,
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
    # Where a task's output goes besides the stage's rows: None, nowhere; else a function of
    # (task, batch, output rows, attempt token) that writes them (e.g. to a Kafka topic, or kept
    # with the checkpoint to be published after the commit) before the task ends.
    deliver: Callable[[str, int, pd.DataFrame, str], int] | None = None
    # The initial state's columns when its rows come with the batch's (INITIAL_COLUMN true,
    # its columns under INITIAL_PREFIX): handleInitialState gets them; () without. A batch with
    # them reads its partition in one table (the initial state's rows are split off first).
    initial_columns: tuple[str, ...] = ()
    # The partition's rows read into one table and sorted here, not streamed as Spark sorted
    # them (a task expected to read few rows: :func:`coordinator.streaming.stage.run_placed`).
    in_memory: bool = False

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
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
        incoming, columns, initial = self._incoming(task, batches)
        events = EventScan(self.spec, self.watermark)
        runs = CountedRuns(
            stream_key_runs(
                events.filtered(incoming),
                self.spec.key_columns,
                columns,
                row_values=self.spec.row_values,
            )
        )
        work = TaskBatch(
            task=task,
            batch=self.batch,
            start_batch=self.start_batch,
            token=self.tokens.get(task),
            key_groups=self.key_groups[task],
            batch_time_ms=self.batch_time_ms,
            rows=runs,
            heads=self.heads,
            watermark_ms=self.watermark.current_ms if self.watermark is not None else None,
            initial=tuple(initial),
        )
        location = SparkExecutorLocationIdProvider().location_id()
        output = CheckedOutput(self._output_table, keep=self.deliver is not None)
        ran = yield from output.stream(task_steps(self.spec, work, location))
        # every output row is checked: now the checkpoint, then the delivery (module docstring)
        outcome = finish_task_batch(
            self.spec, work, location, ran.opened, output.kept, ran.called, None
        )
        if self.deliver is not None:
            self.deliver(task, self.batch, outcome.output, outcome.token)
        where = (current_executor_id(), current_executor_host(), attempt)
        seconds = time.perf_counter() - began
        result = TaskResult.of(outcome, runs.rows, where, seconds, events.figures, output.rows)
        yield self._result_batch(result)

    def _incoming(
        self, task: str, batches: Iterator[pa.RecordBatch]
    ) -> tuple[Iterable[pa.RecordBatch], tuple[str, ...], list[KeyRun]]:
        """The task's rows as Arrow batches sorted by key group and key, the function's columns
        and the initial state's rows per key: the stage's own rows as Spark sorted them, else
        (``in_memory``, an initial state) one table sorted here."""
        import pyarrow as pa

        if not self.in_memory and not self.initial_columns:
            return batches, self.input_columns, []
        received = list(batches)
        if not received:
            return (), self.input_columns, []
        table, initial = self._split_initial(pa.Table.from_batches(received))
        return sort_rows(table, self.spec.key_columns).to_batches(), self.input_columns, initial

    def _split_initial(self, table: pa.Table) -> tuple[pa.Table, list[KeyRun]]:
        """The batch's rows, and the initial state's per key (with its own column names)."""
        import pyarrow.compute as pc

        if not self.initial_columns:
            return table, []
        marked = pc.fill_null(table.column(INITIAL_COLUMN), False)
        prefixed = [INITIAL_PREFIX + c for c in self.initial_columns]
        runs = key_runs(
            table.filter(marked), self.spec.key_columns, prefixed, row_values=self.spec.row_values
        )
        for _, _, frame in runs:
            frame.columns = list(self.initial_columns)
        return table.filter(pc.invert(marked)), runs

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
