"""What every stateful query's driver keeps, and the two ends of each batch it runs.

:class:`QueryRuntime` holds the job config, the query's store (durable checkpoints, the local
copies' directory, the function and schemas: a :class:`QuerySpec`), where the output goes (the
sink, an output topic: :mod:`coordinator.streaming.kafka_output`), the options both queries take
(:mod:`coordinator.streaming.options`) and the ZooKeeper side (:mod:`.connections`: the commit
log, the embedded coordinator replica, the driver member). A query (``stateful_foreach_batch``'s
:class:`StatefulQuery`, the Kafka query) runs each batch as:

1. :meth:`QueryRuntime.begin`: the batch's start (:mod:`coordinator.streaming.commits`: the
   latest commit, or for a batch id run again the commit before it; a lower batch id is refused);
   with an event-time column, the batch's watermarks are the ones that commit kept
   (:mod:`locality.spark.state.eventtime`); the batch's processing time is read from (or
   written to) the pending record; the executors
   are synced and the driver waits for a job model every executor follows; a :class:`BatchPlan`;
2. the query's own stage (its tasks pinned to the executors the plan names);
3. :meth:`QueryRuntime.finish`: the sink gets the output, the batch is committed (each task's
   token and chain heads, and what the query adds: the input's offsets; with an event-time
   column, this batch's watermark and the next one, from the tasks' largest event times) under
   the driver's epoch; then, none of it able to fail the committed batch, old records are
   pruned, task locality is written where each task ran, the batch's report goes to the job's
   history (:mod:`coordinator.streaming.history`) and standby copies are brought to the commit
   (a step that fails is logged, counted and left to the next batch, which writes the locality
   owed; together they wait on ZooKeeper at most :data:`AFTER_COMMIT_ZK_BUDGET_S`); a
   :class:`BatchReport`.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Unpack

from prometheus_client import Counter

from coordinator.config import JobConfig
from coordinator.member.spark_driver import DriverAssignment, SparkDriverMember
from coordinator.observability import job_logger
from coordinator.streaming.commits import CommitLog
from coordinator.streaming.connections import QueryConnections
from coordinator.streaming.history import batch_entry, executor_locations, record_batch
from coordinator.streaming.kafka_layout import KafkaLayoutError, partitions_added
from coordinator.streaming.kafka_output import KafkaOutput
from coordinator.streaming.kafka_progress import KafkaProgress
from coordinator.streaming.options import (
    OutputOptions,
    QueryOptions,
    check_options,
    check_runtime_options,
    state_storage,
)
from coordinator.streaming.reports import (
    BatchReport,
    StreamingBatchError,
    StreamingUsageError,
    batch_report,
    failure_cause,
)
from coordinator.streaming.stage import BatchPlan, StageRun
from coordinator.streaming.standby import NO_STANDBYS, StandbyStage, refresh_standbys
from locality.spark.kafka import KafkaClientConfig
from locality.spark.state import (
    CommitRecord,
    EventTime,
    QuerySpec,
    StoreSpec,
    parse_schema,
    write_pending,
)
from locality.spark.state.eventtime import batch_watermark, commit_extra
from metadata.zk import ZkMetadataStore

__all__ = [
    "BatchReport",
    "Begun",
    "QueryRuntime",
    "StreamingBatchError",
    "StreamingUsageError",
    "failure_cause",
]


@dataclass(frozen=True)
class Begun:
    """A batch begun: its plan, the model in force it follows, when it began."""

    plan: BatchPlan
    assignment: DriverAssignment
    began: float


class QueryRuntime:
    """The driver side every stateful query shares (module docstring)."""

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        key_columns: tuple[str, ...],
        output_schema: Any,
        state_schema: Any,
        config: JobConfig,
        sink: Callable[[Any, int], None] | None,
        kafka: KafkaClientConfig | str | None,
        event_time: EventTime | None = None,
        **options: Unpack[QueryOptions],
    ) -> None:
        check_options(options, type(self).__name__)
        timeout, coordinator = check_runtime_options(key_columns, options, event_time)
        self.key_columns = key_columns
        self.output_schema = output_schema
        output_fields = parse_schema(output_schema, "output_schema", any_type=True)
        self.config = config
        self.coordinator = coordinator
        self.locality_wait = options.get("locality_wait", "30s")
        self.in_force_timeout_s = options.get("in_force_timeout_s", 120.0)
        self.storage = state_storage(options.get("storage"), config)
        self.spec = QuerySpec(
            func=func,
            key_columns=key_columns,
            output_columns=tuple(f.name for f in output_fields),
            state_fields=parse_schema(state_schema, "state_schema"),
            timeout=timeout,
            store=StoreSpec(
                storage=self.storage,
                local_dir=config.state.local_dir
                or os.path.join(tempfile.gettempdir(), "affinity-state"),
                scope=f"{config.job.name}-{config.job.id}",
                max_parallelism=config.state.max_parallelism,
            ),
            event_time=event_time,
        )
        self.reports: list[BatchReport] = []
        self.log = job_logger("affinity.streaming", config.logging.level).bind(
            job=f"{config.job.name}-{config.job.id}"
        )
        self.connections = QueryConnections(config, self.storage, coordinator, self.log)
        self._owed_locality: dict[str, str | None] = {}
        self.sink = sink
        self.output = self._output(kafka, options)
        self.progress: KafkaProgress | None = None  # a Kafka input's offsets shown to Kafka
        self.spark_context: Any = None  # the latest batch's, for the steps after its commit

    def _output(
        self, kafka: KafkaClientConfig | str | None, options: OutputOptions
    ) -> KafkaOutput | None:
        """The output topic (``output_topic``), if any; ``sink`` or a topic is needed."""
        topic = options.get("output_topic")
        if self.sink is None and topic is None:
            raise StreamingUsageError("the output needs a place: sink=, output_topic= or both")
        if topic is None:
            return None
        return KafkaOutput.to_topic(
            kafka,
            topic,
            query=f"{self.config.job.name}-{self.config.job.id}",
            columns=self.spec.output_columns,
            storage=self.storage,
            key_column=options.get("output_key_column", "key"),
            value_column=options.get("output_value_column"),
            transactional=options.get("transactional", True),
            delivery=options.get("delivery", "exactly-once"),
        )

    # ------------------------------------------------------------------ lifecycle

    def start(self, sc: Any) -> SparkDriverMember:
        """Connect, start the embedded coordinator (if so configured) and the driver member."""
        return self.connections.start(sc)

    @property
    def commits(self) -> CommitLog | None:
        """The commit log (None until the first batch, and once closed)."""
        return self.connections.commits

    @property
    def _store(self) -> ZkMetadataStore | None:
        return self.connections.store

    def follow_partitions(self, sc: Any, configured: int, now: int) -> bool:
        """Whether the Kafka input grew from ``configured`` partitions to ``now``: then the job
        config's inputs say ``now`` and the embedded coordinator is started again with it (each
        new partition is a task it places); a :class:`StreamingUsageError` when it cannot grow
        (:func:`~coordinator.streaming.kafka_layout.partitions_added`)."""
        try:
            if not partitions_added(configured, now, embedded=self.coordinator == "embedded"):
                return False
        except KafkaLayoutError as exc:
            raise StreamingUsageError(str(exc)) from None
        self.log.info("kafka.partitions_added", before=configured, now=now)
        inputs = [i.model_copy(update={"partitions": now}) for i in self.config.inputs]
        self.config = self.config.model_copy(update={"inputs": inputs})
        self.connections.restart_coordinator(sc, self.config)
        return True

    def close(self) -> None:
        """Stop the driver member and the embedded coordinator; close the connections."""
        self.connections.close()

    # ------------------------------------------------------------------ a batch's two ends

    def begin(self, sc: Any, batch: int, key_groups: Mapping[str, tuple[int, ...]]) -> Begun:
        """Everything before a batch's tasks run (module docstring, step 1)."""
        began = time.perf_counter()
        self.spark_context = sc
        driver = self.start(sc)
        commits = self._commit_log()
        start = commits.start_of(batch)
        batch_time = write_pending(self.storage, batch, int(time.time() * 1000))
        driver.sync()
        assignment = driver.in_force(self.in_force_timeout_s, key_groups)
        plan = BatchPlan(
            batch=batch,
            batch_time_ms=batch_time,
            start=start,
            key_groups=dict(key_groups),
            placement=driver.placement(assignment.task_to_processor),
            executors=driver.registrar.executors(),
            epoch=commits.epoch,
            watermark=batch_watermark(self.spec.event_time, start),
        )
        return Begun(plan, assignment, began)

    def next_batch(self, sc: Any) -> int:
        """The batch id after the latest commit (0: none), for a query that numbers its own."""
        self.start(sc)
        latest = self._commit_log().latest()
        return latest.batch + 1 if latest is not None else 0

    def _commit_log(self) -> CommitLog:
        if self.commits is None:
            raise StreamingBatchError("the query is closed (its commit log is not open)")
        return self.commits

    def finish(
        self, sc: Any, begun: Begun, stage: StageRun, offsets: Mapping[str, int] | None = None
    ) -> BatchReport:
        """Everything after a batch's tasks ran (module docstring, step 3)."""
        plan = begun.plan
        try:
            if self.sink is not None:
                self.sink(stage.output, plan.batch)
            commit = CommitRecord.of(
                plan.batch, stage.results, self.spec.store.max_parallelism, plan.start, offsets
            )
            maxima = [r.max_event_ms for r in stage.results.values()]
            extra = commit_extra(plan.watermark, self.spec.event_time, maxima)
            commit = self._commit_log().commit(replace(commit, extra=extra))
        finally:
            stage.release()
        failures, standby = self._after_commit(sc, begun, stage, commit)
        report = batch_report(plan.batch, begun.assignment.version, stage)
        report = replace(
            report,
            standby=standby,
            seconds=time.perf_counter() - begun.began,
            after_commit_failures=failures,
            watermark_ms=plan.watermark.current_ms if plan.watermark is not None else -1,
        )
        self.reports.append(report)
        figures = {k: v for k, v in report.__dict__.items() if k != "standby"}
        self.log.info("streaming.batch", **figures, **standby.figures())
        return report

    def _after_commit(
        self, sc: Any, begun: Begun, stage: StageRun, commit: CommitRecord
    ) -> tuple[int, StandbyStage]:
        """What follows a commit: old records pruned, locality written, standbys refreshed. The
        batch is committed: a step that fails is logged and counted, never raised (Spark would
        stop the query and replay a committed batch); locality owed is written next batch."""
        failures = 0
        standby = NO_STANDBYS
        self._owed_locality.update(stage.run.ran_on)
        steps: list[tuple[str, Callable[[], Any]]] = [
            ("prune", lambda: self._commit_log().prune(commit, begun.plan.start)),
            ("locality", lambda: self._write_locality(self.start(sc))),
            *self.after_commit_steps(commit),
            ("history", lambda: self._record_history(sc, begun, stage, commit)),
        ]
        with self._zookeeper_budget():
            for step, action in steps:
                try:
                    action()
                except Exception as exc:  # logged and counted: the batch is committed
                    failures += 1
                    self._after_commit_failed(step, commit.batch, exc)
            try:
                standby = refresh_standbys(
                    sc,
                    self.start(sc),
                    self.spec.store,
                    begun.assignment,
                    commit,
                    begun.plan.start,
                    locality_wait=self.locality_wait,
                    log=self.log,
                )
            except Exception as exc:  # logged and counted: the batch is committed
                failures += 1
                self._after_commit_failed("standby", commit.batch, exc)
        return failures, standby

    def _zookeeper_budget(self) -> contextlib.AbstractContextManager[None]:
        """The steps after a commit wait on ZooKeeper :data:`AFTER_COMMIT_ZK_BUDGET_S` in all:
        a server that stops answering (frozen, partitioned) holds a committed batch that long,
        not a retry deadline per call."""
        if self._store is None:
            return contextlib.nullcontext()
        return self._store.within(AFTER_COMMIT_ZK_BUDGET_S)

    def after_commit_steps(self, commit: CommitRecord) -> list[tuple[str, Callable[[], Any]]]:
        """The steps after a commit the output topic and the Kafka input add (named)."""
        steps: list[tuple[str, Callable[[], Any]]] = []
        if self.output is not None:
            steps += self.output.after_commit_steps(self.spark_context, commit)
        if self.progress is not None:
            steps.append(self.progress.after_commit_step(commit))
        return steps

    def source_lag(self, commit: CommitRecord) -> Mapping[str, int]:
        """Records behind per Kafka input partition after ``commit`` (none known without one)."""
        return self.progress.lag(commit) if self.progress is not None else {}

    def publish_owed(self, sc: Any) -> None:
        """Publish the latest commit's output if this driver has not, before a later batch."""
        if self.output is not None and self.output.publisher is not None:
            self.start(sc)
            self.output.publish_owed(sc, self._commit_log().latest())

    def _record_history(self, sc: Any, begun: Begun, stage: StageRun, commit: CommitRecord) -> None:
        version, locations = begun.assignment.version, executor_locations(self.start(sc))
        entry = batch_entry(
            begun.plan,
            stage,
            version=version,
            began=begun.began,
            locations=locations,
            lag=self.source_lag(commit),
        )
        record_batch(self._store, entry, keep=self.config.coordinator.history)

    def _after_commit_failed(self, step: str, batch: int, exc: Exception) -> None:
        AFTER_COMMIT_FAILURES.labels(step=step).inc()
        self.log.warning(
            "streaming.after_commit_failed",
            step=step,
            batch=batch,
            error=f"{type(exc).__name__}: {exc}",
            retried="at the next batch",
        )

    def _write_locality(self, driver: SparkDriverMember) -> None:
        """Each task's location: where it ran (its state is there now); what a failed write
        owed is written with the next batch's."""
        location_of = {
            r.executor.executor_id: r.location_id for r in driver.registrar.registrations.values()
        }
        ran_on = self._owed_locality
        where = {t: location_of[e] for t, e in ran_on.items() if e is not None and e in location_of}
        if where and self._store is not None:
            self._store.locality.write(where)
        self._owed_locality = {}


#: Seconds the steps after a commit may wait on ZooKeeper in all (the locality write, the
#: history entry, the standby lags): once spent, their ZooKeeper calls fail at once
#: (``StoreUnavailable``), are counted and left to the next batch.
AFTER_COMMIT_ZK_BUDGET_S = 10.0

#: Steps after a commit that failed (logged; the batch stays committed), by step.
AFTER_COMMIT_FAILURES = Counter(
    "affinity_streaming_after_commit_failures",
    "Steps after a streaming batch's commit that failed and were left to the next batch",
    ["step"],
)
