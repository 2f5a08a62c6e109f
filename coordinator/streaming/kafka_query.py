"""A stateful Kafka query whose tasks own their partitions (Samza's model on Spark):
:func:`stateful_kafka_query` runs a user's ``applyInPandasWithState`` function over the job's
Kafka inputs with no shuffle and nothing through the driver.

Per batch (:meth:`KafkaQuery.run_batch`):

1. the input topics' partition counts are read from the broker (co-partitioned: all equal); a
   partition added is a new task: the job config's input grows, the embedded coordinator is
   started again with it and gives the new task a processor (a rebalance);
2. :meth:`~coordinator.streaming.runtime.QueryRuntime.begin`: the batch id (the last commit's
   plus one), its processing time, the commit it starts from, the executors synced, the model
   in force;
3. the batch's offset ranges (:mod:`coordinator.streaming.kafka_offsets`): from the last
   commit's offsets (a partition never read starts where ``starting_offsets`` says; records
   deleted by retention before they were read fail the batch unless ``fail_on_data_loss`` is
   off) to the end offsets (last stable), at most ``max_records_per_batch`` in all (Spark's
   ``maxOffsetsPerTrigger``; :data:`~coordinator.streaming.kafka_offsets.DEFAULT_MAX_RECORDS`
   unless set); recorded in the pending record, so a batch run again after a failure reads
   exactly the same records (a partition added since its first attempt reads nothing in it and
   starts at the next);
4. one pinned stage, one Spark task per affinity task on its executor, which reads its ranges
   straight from the broker (:class:`locality.spark.state.kafka_task.KafkaTaskInput`), runs the
   function per key with its local state, checkpoints, and writes its output to the output topic
   (``output_topic``) and/or leaves it for ``sink(df, batch_id)``;
5. :meth:`~coordinator.streaming.runtime.QueryRuntime.finish`: the sink, then the commit record
   with each task's checkpoint token *and* each partition's next offset, so a crash anywhere
   before it replays exactly the uncommitted records and the state counts every record once;
   after it, each partition's next offset is also committed to the consumer group
   ``affinity-<job>`` (:attr:`KafkaQuery.group`), for Kafka's own lag tools (metadata only: the
   commit record stays the truth; a failure there is logged and done at the next batch).

Output to ``output_topic`` is exactly once by default, published after the commit, or at least
once, written by the tasks (:mod:`coordinator.streaming.kafka_output`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, Literal, Unpack

from coordinator.config import JobConfig
from coordinator.streaming.kafka_layout import KafkaLayout, KafkaLayoutError
from coordinator.streaming.kafka_offsets import (
    DataLossError,
    StartingOffsets,
    batch_cap,
    start_offsets,
)
from coordinator.streaming.kafka_progress import KafkaProgress, consumer_group
from coordinator.streaming.options import QueryOptions
from coordinator.streaming.runtime import (
    BatchReport,
    Begun,
    QueryRuntime,
    StreamingBatchError,
    StreamingUsageError,
    failure_cause,
)
from coordinator.streaming.stage import StageRun, run_stage, stage_schemas, task_runner
from groupers import get_ssp_grouper
from groupers.keys import stable_hash
from locality.spark.jvm import JvmClassesMissing, require_classes
from locality.spark.kafka import (
    KafkaClientConfig,
    KafkaPartition,
    as_client_config,
    beginning_offsets,
    end_offsets,
    partition_counts,
    plan_ranges,
)
from locality.spark.pinning import job_description
from locality.spark.state.durable import pin_pending_ranges
from locality.spark.state.kafka_task import KafkaTaskInput, decode_utf8
from locality.spark.state.pinned_task import TASK_COLUMN

__all__ = ["KafkaQuery", "stateful_kafka_query"]


class KafkaQuery(QueryRuntime):
    """A Kafka query's driver (module docstring); ``run_batch()`` runs one batch."""

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        spark: Any,
        kafka: KafkaClientConfig | str,
        output_schema: Any,
        state_schema: Any,
        config: JobConfig,
        key_columns: Iterable[str] = ("key",),
        sink: Callable[[Any, int], None] | None = None,
        decode: Callable[..., Any] = decode_utf8,
        max_records_per_batch: int | Literal["default"] | None = "default",
        starting_offsets: str | Mapping[str, Any] = "earliest",
        fail_on_data_loss: bool = True,
        **options: Unpack[QueryOptions],
    ) -> None:
        if options.get("timeout") == "EventTimeTimeout":
            raise StreamingUsageError(
                "the Kafka query has no event time yet (EventTimeTimeout): stateful_foreach_batch "
                "over readStream.format('affinity-kafka') takes event_time=(column, delay) and "
                "runs each task where its partition is read, with no shuffle"
            )
        super().__init__(
            func,
            key_columns=tuple(key_columns),
            output_schema=output_schema,
            state_schema=state_schema,
            config=config,
            sink=sink,
            kafka=kafka,
            **options,
        )
        self.spark, self.decode = spark, decode
        self.client = as_client_config(kafka)
        self.topics = _kafka_topics(config)
        try:
            self.max_records = batch_cap(max_records_per_batch)
            self.starting = StartingOffsets.parse(starting_offsets, self.topics)
        except ValueError as exc:
            raise StreamingUsageError(str(exc)) from None
        self.fail_on_data_loss = fail_on_data_loss
        self.layout = self._layout(config)
        self.progress = KafkaProgress.of(self.client, config, self.topics)

    # ------------------------------------------------------------------ a batch

    def run_batch(self) -> BatchReport:
        """Run the next batch (module docstring); a batch with no new record still runs (its
        keys' timeouts fire)."""
        try:
            require_classes(self.spark)
        except JvmClassesMissing as exc:
            raise StreamingUsageError(str(exc)) from None
        sc = self.spark.sparkContext
        self._follow_partitions(sc)
        self.publish_owed(sc)
        begun = self.begin(sc, self.next_batch(sc), self.layout.key_groups())
        ranges = self._ranges(begun)
        stage = self._run_stage(begun, ranges)
        offsets = {name: end for name, (_, end) in ranges.items()}
        return self.finish(sc, begun, stage, offsets=offsets)

    def run(
        self, *, batches: int | None = None, until_idle: bool = True, pause_s: float = 0.5
    ) -> list[BatchReport]:
        """Run batches: ``batches`` of them, or (``until_idle``) until a batch reads nothing."""
        done: list[BatchReport] = []
        while batches is None or len(done) < batches:
            report = self.run_batch()
            done.append(report)
            if until_idle and batches is None and report.rows_in == 0:
                break
            time.sleep(pause_s if report.rows_in == 0 else 0)
        return done

    def _ranges(self, begun: Begun) -> dict[str, tuple[int, int]]:
        """The batch's [start, end) per input partition (``topic-partition``), as recorded."""
        partitions = self.layout.input_partitions()
        done = begun.plan.start.offsets if begun.plan.start is not None else {}
        first = beginning_offsets(self.client, self.topics)
        ends = end_offsets(self.client, self.topics)
        try:
            starts = start_offsets(
                partitions, done, first, ends, self.starting, self.fail_on_data_loss, self.log
            )
        except DataLossError as exc:
            raise StreamingBatchError(f"batch {begun.plan.batch}: {exc}") from None
        planned = plan_ranges(starts, {p: ends[p] for p in partitions}, self.max_records)
        return pin_pending_ranges(
            self.storage, begun.plan.batch, {str(r.key): (r.start, r.end) for r in planned}
        )

    def _run_stage(self, begun: Begun, ranges: dict[str, tuple[int, int]]) -> StageRun:
        from pyspark.sql import functions as F

        from locality.spark.kafka import OffsetRange

        plan = begun.plan
        planned = {  # a partition added after the batch's ranges were recorded reads nothing
            KafkaPartition(p.topic, p.partition): OffsetRange(
                p.topic, p.partition, *ranges.get(str(p), (0, 0))
            )
            for p in self.layout.input_partitions()
        }
        source = KafkaTaskInput(
            self.client,
            self.layout.ranges(planned),
            self.layout.buckets(),
            {t: groups[0] for t, groups in self.layout.key_groups().items()},
            key_hash=stable_hash,
            decode=self.decode,
        )
        struct, arrow_schema = stage_schemas(self.spark, self.output_schema)
        runner = task_runner(self.spec, plan, arrow_schema, ())
        deliver = self.output.deliver if self.output is not None else None
        runner = replace(runner, source=source, deliver=deliver)
        tasks = self.spark.range(len(plan.tasks)).select(F.col("id").cast("int").alias(TASK_COLUMN))
        try:
            with job_description(self.spark.sparkContext, f"affinity kafka batch {plan.batch}"):
                return run_stage(tasks, runner, struct, plan, locality_wait=self.locality_wait)
        except Exception as exc:
            raise StreamingBatchError(
                f"batch {plan.batch} failed and nothing was committed: {failure_cause(exc)}"
            ) from exc

    @property
    def group(self) -> str:
        """The consumer group the query's committed offsets are shown under."""
        return consumer_group(self.config)

    # ------------------------------------------------------------------ partitions

    def _layout(self, config: JobConfig) -> KafkaLayout:
        inputs = config.stream_inputs()
        grouper = get_ssp_grouper(config.ssp_grouper.name, **dict(config.ssp_grouper.options))
        try:
            return KafkaLayout.of(
                grouper.group(inputs),
                self.topics,
                inputs[0].partitions,
                config.state.max_parallelism,
            )
        except KafkaLayoutError as exc:
            raise StreamingUsageError(str(exc)) from None

    def _follow_partitions(self, sc: Any) -> None:
        """Partition counts from the broker: co-partitioned, and a partition added is a task."""
        counts = partition_counts(self.client, self.topics)
        if len(set(counts.values())) != 1:
            raise StreamingUsageError(
                f"the input topics are not co-partitioned (partition counts {counts}): a task "
                "reads partition p of every input topic"
            )
        (now,) = set(counts.values())
        if self.follow_partitions(sc, self.layout.partitions, now):
            self.layout = self._layout(self.config)


def stateful_kafka_query(func: Callable[..., Any], **options: Any) -> KafkaQuery:
    """A :class:`KafkaQuery` (module docstring): ``func`` is an ``applyInPandasWithState``
    function; ``options``: ``spark``, ``kafka`` (bootstrap servers or a
    :class:`~locality.spark.kafka.KafkaClientConfig`), ``output_schema``, ``state_schema``,
    ``config`` (its inputs: the Kafka topics), ``key_columns`` (default ``("key",)``), and
    ``sink`` or ``output_topic``; see ``docs/spark.md`` ("Kafka")."""
    return KafkaQuery(func, **options)


def _kafka_topics(config: JobConfig) -> tuple[str, ...]:
    inputs = config.stream_inputs()
    others = [f"{i.system}:{i.stream}" for i in inputs if i.system != "kafka"]
    if not inputs or others:
        raise StreamingUsageError(
            "a Kafka query's inputs must all be Kafka topics (system: kafka), got "
            f"{others or 'none'}"
        )
    return tuple(sorted(i.stream for i in inputs))
