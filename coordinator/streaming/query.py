"""The driver side of ``stateful_foreach_batch``: a user's ``applyInPandasWithState`` function
run in ``foreachBatch``, each key's state kept on the executor its job model names.

Per micro-batch (:meth:`StatefulQuery.__call__`, called by Spark with ``(df, batch_id)``):

1. the stream and the session are checked (key columns, a classic session with affinity's JVM
   classes) before anything is touched; a batch id Spark runs again forgets its earlier commit;
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
   one result row per task (its checkpoint token), never the batch's rows;
6. ``sink(df, batch_id)`` gets the output rows where the tasks produced them, then the batch is
   committed (the tasks' checkpoint tokens) and task locality is written where each task ran;
7. with standby replicas, every standby copy is brought to the commit on its executor's host
   and its lag reported (:mod:`coordinator.streaming.standby`).

A failure anywhere before the commit commits nothing; Spark re-runs the batch id and it starts
again from the previous commit, with the same processing time: the same output and state.
``data_path="driver"`` keeps the former path, whose rows pass through the driver
(:mod:`coordinator.streaming.driver_path`), to be measured against.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from kazoo.client import KazooClient

from coordinator.config import JobConfig
from coordinator.connection import client_from_config, store_from_config
from coordinator.member.spark_driver import SparkDriverMember
from coordinator.observability import job_logger
from coordinator.streaming.driver_path import run_driver_stage
from coordinator.streaming.heartbeat import drop_heartbeats
from coordinator.streaming.routing import check_key_columns
from coordinator.streaming.stage import BatchPlan, StageRun, run_pinned_stage
from coordinator.streaming.standby import NO_STANDBYS, StandbyStage, refresh_standbys
from groupers import get_ssp_grouper
from locality.spark.jvm import JvmClassesMissing, require_classes
from locality.spark.state import (
    TIMEOUTS,
    CommitRecord,
    DirectoryStateStorage,
    QuerySpec,
    Storage,
    StoreSpec,
    latest_commit,
    parse_schema,
    write_commit,
    write_pending,
)
from locality.spark.state.durable import forget_commits_from
from locality.spark.state.keyspace import KeySpace, key_text
from locality.spark.state.pinned_task import TaskResult
from metadata.zk import ZkMetadataStore

__all__ = [
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


class StreamingUsageError(ValueError):
    """``stateful_foreach_batch`` was given something it cannot use (the message says what)."""


class StreamingBatchError(RuntimeError):
    """A micro-batch failed; nothing of it was committed (Spark may run it again)."""


@dataclass(frozen=True)
class BatchReport:
    """What one micro-batch did."""

    batch: int
    version: int
    seconds: float
    tasks: int
    warm: int  # tasks whose state was in memory or in the host's local copy
    restored: int  # tasks that loaded their state from the durable checkpoints
    new: int  # tasks with nothing committed yet
    bytes_restored: int
    bytes_written: int
    pinned_ok: int
    pinned_total: int
    rows_in: int
    rows_out: int
    timed_out: int
    driver_rows: int  # the batch's rows through the driver (0; the former path: in and out)
    standby: StandbyStage = NO_STANDBYS  # the standby copies brought to this batch's commit


class StatefulQuery:
    """The ``foreachBatch`` handler ``stateful_foreach_batch`` returns (module docstring)."""

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        key_columns: Iterable[str],
        output_schema: Any,
        state_schema: Any,
        sink: Callable[[Any, int], None],
        config: JobConfig,
        timeout: str = "NoTimeout",
        storage: Storage | None = None,
        coordinator: str = "embedded",
        locality_wait: str | None = "30s",
        in_force_timeout_s: float = 120.0,
        data_path: str = "pinned-shuffle",
    ) -> None:
        self.key_columns = tuple(key_columns)
        if not self.key_columns or not all(isinstance(c, str) and c for c in self.key_columns):
            raise StreamingUsageError(f"key_columns must name columns, got {key_columns!r}")
        if timeout not in TIMEOUTS:
            raise StreamingUsageError(f"timeout must be one of {TIMEOUTS}, got {timeout!r}")
        if data_path not in DATA_PATHS:
            raise StreamingUsageError(f"data_path must be one of {DATA_PATHS}, got {data_path!r}")
        self.data_path = data_path
        if coordinator not in ("embedded", "external"):
            raise StreamingUsageError(
                f"coordinator must be 'embedded' or 'external', got {coordinator!r}"
            )
        self.output_fields = parse_schema(output_schema, "output_schema", any_type=True)
        self.output_schema = output_schema
        self.config = config
        self.sink = sink
        self.coordinator = coordinator
        self.locality_wait = locality_wait
        self.in_force_timeout_s = in_force_timeout_s
        self.storage = storage if storage is not None else _default_storage(config)
        self.keyspace = _keyspace(config)
        self.spec = QuerySpec(
            func=func,
            key_columns=self.key_columns,
            output_columns=tuple(f.name for f in self.output_fields),
            state_fields=parse_schema(state_schema, "state_schema"),
            timeout=timeout,
            store=StoreSpec(
                storage=self.storage,
                local_dir=config.state.local_dir
                or os.path.join(tempfile.gettempdir(), "affinity-state"),
                scope=f"{config.job.name}-{config.job.id}",
                max_parallelism=config.state.max_parallelism,
            ),
        )
        self.reports: list[BatchReport] = []
        self.log = job_logger("affinity.streaming", config.logging.level).bind(
            job=f"{config.job.name}-{config.job.id}"
        )
        self._clients: list[KazooClient] = []
        self._driver: SparkDriverMember | None = None
        self._store: ZkMetadataStore | None = None
        self._stop = threading.Event()
        self._coordinator_thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self, sc: Any) -> SparkDriverMember:
        """Connect, start the embedded coordinator (if so configured) and the driver member."""
        if self._driver is not None:
            return self._driver
        store = self._connect()
        store.ensure_layout()
        if self.coordinator == "embedded":
            self._start_coordinator(sc)
        self._store = store
        self._driver = SparkDriverMember(
            store.client,
            store,
            sc,
            job=f"{self.config.job.name}-{self.config.job.id}",
            log=job_logger("affinity.member", self.config.logging.level),  # logging.level
        )
        return self._driver

    def _connect(self) -> ZkMetadataStore:
        client = client_from_config(self.config)
        self._clients.append(client)
        return store_from_config(self.config, client)

    def _start_coordinator(self, sc: Any) -> None:
        # The embedded default runs a coordinator replica in the driver (DESIGN.md "Spark
        # streaming"); the one place the member side starts the leader side.
        from coordinator.leader.service import CoordinatorService

        store = self._connect()
        service = CoordinatorService(
            self.config, store.client, store, identifier=f"driver-{sc.applicationId}"
        )
        self._coordinator_thread = threading.Thread(
            target=service.run, args=(self._stop,), name="affinity-coordinator", daemon=True
        )
        self._coordinator_thread.start()

    def close(self) -> None:
        """Stop the driver member and the embedded coordinator; close the connections."""
        if self._driver is not None:
            with contextlib.suppress(Exception):
                self._driver.close()
        self._stop.set()
        if self._coordinator_thread is not None:
            self._coordinator_thread.join(10)
        for client in self._clients:
            with contextlib.suppress(Exception):
                client.stop()
                client.close()
        self._driver = self._store = None
        self._coordinator_thread = None
        self._clients = []
        self._stop = threading.Event()

    # ------------------------------------------------------------------ a micro-batch

    def __call__(self, df: Any, batch_id: int) -> None:
        self.run_batch(df, int(batch_id))

    def run_batch(self, df: Any, batch: int) -> BatchReport:
        """Run micro-batch ``batch`` of ``df`` (see the module docstring)."""
        df = drop_heartbeats(df)  # heartbeat rows (with_heartbeat) only make the batch run
        began = time.perf_counter()
        self._check(df)
        sc = df.sparkSession.sparkContext
        driver = self.start(sc)
        forgotten = forget_commits_from(self.storage, batch)
        if forgotten:
            self.log.info("streaming.batch_again", batch=batch, forgotten_commits=forgotten)
        batch_time = write_pending(self.storage, batch, int(time.time() * 1000))
        start = latest_commit(self.storage, before=batch)
        driver.sync()
        assignment = driver.in_force(self.in_force_timeout_s, self.keyspace.key_groups())
        plan = BatchPlan(
            batch=batch,
            batch_time_ms=batch_time,
            start=start,
            key_groups=self.keyspace.key_groups(),
            placement=driver.placement(assignment.task_to_processor),
            executors=driver.registrar.executors(),
        )
        stage = self._run_stage(df, plan)
        try:
            self.sink(stage.output, batch)
            results = stage.results
            commit = CommitRecord(
                batch,
                {t: r.token for t, r in results.items()},
                {t: r.key_groups for t, r in results.items()},
                self.keyspace.max_parallelism,
            )
            write_commit(self.storage, commit)
        finally:
            stage.release()
        self._write_locality(driver, stage.run.ran_on)
        standby = refresh_standbys(
            sc,
            driver,
            self.spec.store,
            assignment,
            commit,
            start,
            locality_wait=self.locality_wait,
            log=self.log,
        )
        report = _report(batch, assignment.version, began, stage)
        report = replace(report, standby=standby, seconds=time.perf_counter() - began)
        self.reports.append(report)
        figures = {k: v for k, v in report.__dict__.items() if k != "standby"}
        self.log.info("streaming.batch", **figures, **standby.figures())
        return report

    def _check(self, df: Any) -> None:
        """Refuse, before any state is touched, a stream or session this cannot run."""
        problem = check_key_columns(df.schema, self.key_columns)
        if problem is not None:
            raise StreamingUsageError(problem)
        if self.data_path == "pinned-shuffle":
            try:
                require_classes(df.sparkSession)
            except JvmClassesMissing as exc:
                raise StreamingUsageError(str(exc)) from None

    def _run_stage(self, df: Any, plan: BatchPlan) -> StageRun:
        run = run_pinned_stage if self.data_path == "pinned-shuffle" else run_driver_stage
        try:
            return run(
                df,
                self.spec,
                self.keyspace,
                plan,
                self.output_schema,
                locality_wait=self.locality_wait,
            )
        except Exception as exc:
            raise StreamingBatchError(
                f"batch {plan.batch} failed and nothing was committed: {_cause(exc)}"
            ) from exc

    def _write_locality(self, driver: SparkDriverMember, ran_on: Mapping[str, str | None]) -> None:
        """Each task's location: where it ran (its state is there now)."""
        location_of = {
            r.executor.executor_id: r.location_id for r in driver.registrar.registrations.values()
        }
        where = {t: location_of[e] for t, e in ran_on.items() if e is not None and e in location_of}
        if where and self._store is not None:
            self._store.locality.write(where)


def _cause(exc: BaseException) -> str:
    """The line of a failed Spark job that says why (our task error, else the first line)."""
    text = str(exc)
    for line in text.splitlines():
        if "StatefulFunctionError:" in line:
            return line.split("StatefulFunctionError:", 1)[1].strip()
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[0].strip() if lines else repr(exc)


def _report(batch: int, version: int, began: float, stage: StageRun) -> BatchReport:
    values: list[TaskResult] = list(stage.results.values())
    return BatchReport(
        batch=batch,
        version=version,
        seconds=time.perf_counter() - began,
        tasks=len(values),
        warm=sum(1 for r in values if r.warm),
        restored=sum(1 for r in values if r.source == "restored"),
        new=sum(1 for r in values if r.source == "new"),
        bytes_restored=sum(r.bytes_restored for r in values),
        bytes_written=sum(r.bytes_written for r in values),
        pinned_ok=stage.run.pinned_ok,
        pinned_total=stage.run.total,
        rows_in=sum(r.rows_in for r in values),
        rows_out=sum(r.rows_out for r in values),
        timed_out=sum(r.timed_out for r in values),
        driver_rows=stage.driver_rows,
    )


def _default_storage(config: JobConfig) -> Storage:
    if not config.state.checkpoint_dir:
        raise StreamingUsageError(
            "state.checkpoint_dir is not set in the job config: stateful_foreach_batch needs a "
            "durable directory for its checkpoints (or pass storage=...)"
        )
    return DirectoryStateStorage(config.state.checkpoint_dir)


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
