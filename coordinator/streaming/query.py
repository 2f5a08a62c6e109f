"""The driver side of ``stateful_foreach_batch``: a user's ``applyInPandasWithState`` function
run in ``foreachBatch``, each key's state kept on the executor its job model names.

Per micro-batch (:meth:`StatefulQuery.__call__`, called by Spark with ``(df, batch_id)``):

1. the stream and the session are checked (key columns, a classic session with affinity's JVM
   classes) before anything is touched; a batch id Spark runs again forgets its earlier commit
   (one this driver committed is done already: nothing runs);
2. the batch's processing time is read from (or written to) the pending record, so every
   attempt of the batch uses the same one (timeouts replay exactly);
3. the state starts from the latest commit *before* the batch id;
4. the executors are synced as processors (:class:`SparkDriverMember`) and the driver waits
   for a job model every executor follows (DONE); its task -> processor gives each task's
   executor;
5. the pinned stage (:mod:`coordinator.streaming.stage`): the rows go from the source's
   partitions to their task in one shuffle between executors (routing computed there: task
   ``(h // f) mod P`` / bucket ``h mod f`` of the key's hash ``h``, key group ``h mod
   max_parallelism``), each task runs on its executor, opens its state (memory, the host's local
   copy, or a restore), calls the function per key and checkpoints the batch; the driver gets
   one result row per task (its checkpoint token), never the batch's rows. When the job's
   inputs are Kafka topics whose partitions its tasks own (``group-by-partition``:
   co-partitioned topics, key buckets too) and the stream is the pinned Kafka source
   (``format("affinity-kafka")``; with several topics, key buckets or ``minPartitions``, its
   option ``affinity.tasksPerPartition``), there is no shuffle: each task runs where its
   partition is read, keeping key group p x f + b (:mod:`coordinator.streaming.kafka_stage`);
6. ``sink(df, batch_id)`` gets the output rows where the tasks produced them, then the batch is
   committed (the tasks' checkpoint tokens) and task locality is written where each task ran;
   with ``output_topic=``, the output goes to a Kafka topic too, exactly once by default
   (:mod:`coordinator.streaming.kafka_output`: kept with the checkpoint, published after the
   commit, and a publish owed is done before the next batch);
7. with standby replicas, every standby copy is brought to the commit on its executor's host
   and its lag reported (:mod:`coordinator.streaming.standby`).

A failure anywhere before the commit commits nothing; Spark re-runs the batch id and it starts
again from the previous commit, with the same processing time: the same output and state.
``data_path="driver"`` keeps the former path, whose rows pass through the driver
(:mod:`coordinator.streaming.driver_path`), to be measured against.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, Unpack

from coordinator.config import JobConfig
from coordinator.streaming.driver_path import run_driver_stage
from coordinator.streaming.heartbeat import drop_heartbeats
from coordinator.streaming.initial_state import InitialState
from coordinator.streaming.kafka_layout import KafkaLayout, KafkaLayoutError, config_layout
from coordinator.streaming.kafka_offsets import OffsetsBehindError, spark_batch_offsets
from coordinator.streaming.kafka_progress import KafkaProgress
from coordinator.streaming.kafka_stage import partition_tasks, run_partitioned_stage
from coordinator.streaming.options import QueryOptions
from coordinator.streaming.routing import check_key_columns
from coordinator.streaming.runtime import (
    BatchReport,
    QueryRuntime,
    StreamingBatchError,
    StreamingUsageError,
    failure_cause,
)
from coordinator.streaming.stage import BatchPlan, StageRun, run_pinned_stage
from groupers import get_ssp_grouper
from locality.spark.jvm import JvmClassesMissing, require_classes
from locality.spark.kafka import KafkaClientConfig, KafkaPartition, as_client_config
from locality.spark.kafka_source import SourcePart, source_partitions, source_ranges
from locality.spark.state import EventTime, EventTimeError
from locality.spark.state.keyspace import KeySpace, key_text

__all__ = [
    "DATA_PATHS",
    "BatchReport",
    "KeySpace",
    "StatefulQuery",
    "StreamingBatchError",
    "StreamingUsageError",
    "key_text",
]


#: How a batch's rows reach their tasks: one pinned shuffle between executors (the default), or
#: the former path through the driver (:mod:`coordinator.streaming.driver_path`).
DATA_PATHS = ("pinned-shuffle", "driver")


class StatefulQuery(QueryRuntime):
    """The ``foreachBatch`` handler ``stateful_foreach_batch`` returns (module docstring)."""

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        key_columns: Iterable[str],
        output_schema: Any,
        state_schema: Any,
        config: JobConfig,
        sink: Callable[[Any, int], None] | None = None,
        kafka: KafkaClientConfig | str | None = None,
        data_path: str = "pinned-shuffle",
        event_time: Any = None,
        initial_state: InitialState | None = None,
        **options: Unpack[QueryOptions],
    ) -> None:
        if data_path not in DATA_PATHS:
            raise StreamingUsageError(f"data_path must be one of {DATA_PATHS}, got {data_path!r}")
        for option, given in (
            ("output_topic", options.get("output_topic")),
            ("initial_state", initial_state),
        ):
            if given is not None and data_path != "pinned-shuffle":
                raise StreamingUsageError(f'{option}= needs data_path="pinned-shuffle"')
        super().__init__(
            func,
            key_columns=tuple(key_columns),
            output_schema=output_schema,
            state_schema=state_schema,
            config=config,
            sink=sink,
            kafka=kafka,
            event_time=_event_time(event_time, data_path),
            **options,
        )
        self.data_path = data_path
        self.initial_state = initial_state
        self.kafka_layout = _kafka_layout(config)
        try:  # a job whose tasks own Kafka partitions needs no key space over the pinned source
            self._keys: KeySpace | str = _keyspace(config)
        except StreamingUsageError as exc:
            if self.kafka_layout is None:
                raise
            self._keys = str(exc)
        if kafka is not None and self.kafka_layout is not None:
            client = as_client_config(kafka)
            self.progress = KafkaProgress.of(client, config, self.kafka_layout.topics)
        self._partitioned: bool | None = None  # the first batch's data path (kept after)
        self._largest_task: int | None = None  # rows of the previous batch's largest task

    def __call__(self, df: Any, batch_id: int) -> None:
        self.run_batch(df, int(batch_id))

    def run_batch(self, df: Any, batch: int) -> BatchReport | None:
        """Run micro-batch ``batch`` of ``df`` (see the module docstring); None: this driver
        committed it already (Spark runs it again), nothing runs."""
        df = drop_heartbeats(df)  # heartbeat rows (with_heartbeat) only make the batch run
        self._check(df)
        sc = df.sparkSession.sparkContext
        self.publish_owed(sc)
        if self.commits is not None and self.commits.committed_here(batch):
            self.log.warning("streaming.batch_committed_here", batch=batch)
            return None
        partitions = self._kafka_partitions(df, sc)
        if partitions is not None:
            self._follow_partitions(sc, partitions)
            self._check_tasks(partitions)
        groups = self.keyspace.key_groups() if partitions is None else self._layout().key_groups()
        begun = self.begin(sc, batch, groups)
        offsets = self._offsets(df, begun.plan) if partitions is not None else None
        plan = replace(begun.plan, task_rows=self._task_rows(df, partitions))
        stage = self._run_stage(df, plan, partitions)
        self._largest_task = max((r.rows_in for r in stage.results.values()), default=0)
        return self.finish(sc, begun, stage, offsets=offsets)

    def _task_rows(self, df: Any, partitions: list[SourcePart | None] | None) -> int | None:
        """The most rows a task may read in the batch: over the pinned Kafka source its
        partition's records of every topic in the batch (Spark's plan); else the largest task of
        the previous batch (None: none yet). A task may read more than
        ``spark.affinity.task.streamRows`` streams them (:func:`run_placed` of
        :mod:`coordinator.streaming.stage`)."""
        if partitions is None:
            return self._largest_task
        return largest_task_rows(source_ranges(df) or {})

    def _follow_partitions(self, sc: Any, partitions: list[SourcePart | None]) -> None:
        """A batch reading a partition past the job config's count: the topic grew, and each
        partition added is a task the embedded coordinator places (as for the Kafka query)."""
        now = 1 + max((p.partition for p in partitions if p is not None), default=-1)
        if now > self._layout().partitions and self.follow_partitions(
            sc, self._layout().partitions, now
        ):
            self.kafka_layout = _kafka_layout(self.config)

    def _check_tasks(self, partitions: list[SourcePart | None]) -> None:
        """Refuse, before any state is touched, a batch whose partitions are not one per task
        (e.g. several topics, key buckets or ``minPartitions`` without the source's option
        ``affinity.tasksPerPartition``)."""
        try:
            partition_tasks(self._layout(), partitions)
        except KafkaLayoutError as exc:
            raise StreamingUsageError(str(exc)) from None

    def _offsets(self, df: Any, plan: BatchPlan) -> dict[str, int]:
        """The next offset of every partition after this batch, for its commit record; refused
        when Spark's offsets for the batch are behind the state's (``OffsetsBehindError``)."""
        ranges = source_ranges(df) or {}
        done = plan.start.offsets if plan.start is not None else {}
        try:
            return spark_batch_offsets(done, ranges, self.log)
        except OffsetsBehindError as exc:
            raise StreamingUsageError(f"batch {plan.batch}: {exc}") from None

    def _kafka_partitions(self, df: Any, sc: Any) -> list[SourcePart | None] | None:
        """The Kafka partition each partition of ``df`` reads, when the batch runs with no
        shuffle: the job's tasks own Kafka partitions and ``df`` is the pinned source's."""
        if self.kafka_layout is None or self.data_path != "pinned-shuffle":
            return None
        partitions = source_partitions(df)
        if partitions is None and _no_partitions(df):  # nothing new: nothing says the source
            return [] if self._empty_batch_partitioned(sc) else None
        partitioned = partitions is not None
        if self._partitioned is not None and partitioned != self._partitioned:
            raise StreamingUsageError(
                "the stream changed source within the query: a batch of the pinned Kafka source "
                "(format('affinity-kafka')) keeps each task's state in its partition's key group, "
                "a batch of another source routes keys by their hash; keep one source per state"
            )
        self._partitioned = partitioned
        return partitions

    def _empty_batch_partitioned(self, sc: Any) -> bool:
        """Whether a batch with no partition runs as the pinned Kafka source's (every task on an
        empty partition of its own): as this query's earlier batches did, else as the state's
        latest commit was made (its tasks' key groups), else (no state yet) so; a first batch
        with nothing new, as Spark runs on a topic read from its latest offsets, is one."""
        if self._partitioned is not None:
            return self._partitioned
        self.start(sc)
        latest = self._commit_log().latest()
        return latest is None or dict(latest.key_groups) == self._layout().key_groups()

    @property
    def keyspace(self) -> KeySpace:
        """The key space a batch's keys are routed by (a batch not of the pinned Kafka source)."""
        if isinstance(self._keys, str):
            raise StreamingUsageError(
                f"{self._keys}: a batch not of the pinned Kafka source (format('affinity-kafka')) "
                "routes keys by their hash"
            )
        return self._keys

    def _layout(self) -> KafkaLayout:
        assert self.kafka_layout is not None
        return self.kafka_layout

    def _check(self, df: Any) -> None:
        """Refuse, before any state is touched, a stream or session this cannot run."""
        problem = check_key_columns(df.schema, self.key_columns)
        if problem is None and self.spec.event_time is not None:
            problem = check_event_time_column(df.schema, self.spec.event_time.column)
        if problem is None and self.initial_state is not None:
            problem = self.initial_state.check_keys(df.schema, self.key_columns)
        if problem is not None:
            raise StreamingUsageError(problem)
        if self.data_path == "pinned-shuffle":
            try:
                require_classes(df.sparkSession)
            except JvmClassesMissing as exc:
                raise StreamingUsageError(str(exc)) from None

    def _run_stage(
        self, df: Any, plan: BatchPlan, partitions: list[SourcePart | None] | None
    ) -> StageRun:
        deliver = self.output.deliver if self.output is not None else None
        initial = self._initial_state(plan, partitions)
        try:
            if self.data_path == "driver":
                return run_driver_stage(
                    df, self.spec, self.keyspace, plan, self.output_schema,
                    locality_wait=self.locality_wait,
                )  # fmt: skip
            if partitions is not None:
                return run_partitioned_stage(
                    df, self.spec, self._layout(), plan, self.output_schema, partitions,
                    locality_wait=self.locality_wait, deliver=deliver,
                )  # fmt: skip
            return run_pinned_stage(
                df, self.spec, self.keyspace, plan, self.output_schema,
                locality_wait=self.locality_wait, deliver=deliver, initial=initial,
            )  # fmt: skip
        except KafkaLayoutError as exc:
            raise StreamingUsageError(str(exc)) from None
        except Exception as exc:
            raise StreamingBatchError(
                f"batch {plan.batch} failed and nothing was committed: {failure_cause(exc)}"
            ) from exc

    def _initial_state(
        self, plan: BatchPlan, partitions: list[SourcePart | None] | None
    ) -> InitialState | None:
        """The initial state if this batch applies it: only when it starts from no commit
        (:mod:`coordinator.streaming.initial_state`)."""
        if self.initial_state is None or plan.start is not None:
            return None
        if partitions is not None:
            raise StreamingUsageError(
                "initial_state= runs on the pinned shuffle: the pinned Kafka source "
                "(format('affinity-kafka')) reads each task's partition with no shuffle"
            )
        self.log.info(
            "streaming.initial_state", batch=plan.batch, columns=self.initial_state.columns
        )
        return self.initial_state


def _no_partitions(df: Any) -> bool:
    """Whether the batch's DataFrame has no partition (Spark planned nothing to read)."""
    return int(df._jdf.queryExecution().toRdd().getNumPartitions()) == 0


def _event_time(option: Any, data_path: str) -> EventTime | None:
    """``event_time=(column, delay)`` checked (None: no event time)."""
    if option is None:
        return None
    if data_path != "pinned-shuffle":
        raise StreamingUsageError("event_time runs on the pinned-shuffle data path only")
    try:
        return EventTime.of(option)
    except EventTimeError as exc:
        raise StreamingUsageError(str(exc)) from None


def check_event_time_column(schema: Any, column: str) -> str | None:
    """Why ``column`` cannot be the stream's event time (None: it can): as ``withWatermark``,
    it must be a timestamp column; a ``timestamp_ntz`` is refused by name, as Spark 4's
    ``withWatermark`` refuses it (``EVENT_TIME_IS_NOT_ON_TIMESTAMP_TYPE``)."""
    found = [f for f in schema.fields if f.name == column]
    if not found:
        names = [f.name for f in schema.fields]
        return f"event_time column {column!r} is not a column of the stream {names}"
    if found[0].dataType.typeName() == "timestamp_ntz":
        return (
            f"event_time column {column!r} is a timestamp_ntz, which Spark's withWatermark "
            f"refuses too: cast it to a timestamp first, e.g. CAST({column} AS TIMESTAMP) in a "
            "select (read in the session time zone)"
        )
    if found[0].dataType.typeName() != "timestamp":
        return (
            f"event_time column {column!r} must be a timestamp, found "
            f"{found[0].dataType.simpleString()} (e.g. timestamp_millis(...) in a select)"
        )
    return None


def largest_task_rows(ranges: dict[KafkaPartition, tuple[int, int]]) -> int:
    """The most records one task reads in a batch of ``ranges``: its partition number's, summed
    over the topics (a key bucket reads no more than that)."""
    rows: dict[int, int] = {}
    for partition, (start, until) in ranges.items():
        rows[partition.partition] = rows.get(partition.partition, 0) + until - start
    return max(rows.values(), default=0)


def _kafka_layout(config: JobConfig) -> KafkaLayout | None:
    """The tasks' Kafka partitions and key buckets when the job's inputs are Kafka topics of one
    partition count whose partitions its tasks own (``group-by-partition``); None otherwise."""
    try:
        return config_layout(config)
    except KafkaLayoutError:
        return None


def _keyspace(config: JobConfig) -> KeySpace:
    inputs = config.stream_inputs()
    if len(inputs) != 1:
        raise StreamingUsageError(
            f"the job config must have exactly one input (the key space), got {len(inputs)}"
        )
    options = dict(config.ssp_grouper.options)
    tasks = get_ssp_grouper(config.ssp_grouper.name, **options).group(inputs)
    try:
        return KeySpace.of(tasks, inputs[0].partitions, config.state.max_parallelism)
    except ValueError as exc:
        raise StreamingUsageError(str(exc)) from None
