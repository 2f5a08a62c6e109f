"""The two ways of the streaming race (:mod:`coordinator.demo.streaming_race`) and their input.

- :class:`RaceInput`: the file source's input (one JSON file per batch) and the single-process
  reference output;
- :class:`SparkWay`: Spark's own ``groupBy("user").applyInPandasWithState`` with the RocksDB
  state store provider (changelog checkpointing on, :func:`spark_state_conf`);
- :class:`AffinityWay`: the same function through ``stateful_foreach_batch``.

Per batch and way a :class:`RaceBatch`: the trigger's duration (``durationMs.triggerExecution``
of the query's progress, the same clock for both), the state bytes loaded from the checkpoints,
the output rows, and how many tasks (stores) found their state where they ran (warm).

State bytes loaded:

- affinity: the state store's restored-bytes counter (``BatchReport.bytes_restored``);
- Spark: the RocksDB provider's ``rocksdbBytesCopied`` (snapshot files copied from the checkpoint
  by ``RocksDBFileManager.loadImmutableFilesFromDfs``) plus the changelog files it replayed:
  ``rocksdbNumReplayChangelogFiles`` counts them but no metric has their bytes, so they are
  measured on the checkpoint (the files ``(latest snapshot, batch]`` of each store; when not
  every store loaded, that count times their mean size). ``rocksdbNumLoadedFromDfs`` is the
  number of stores loaded from the checkpoint (the others are warm).
"""

from __future__ import annotations

import json
import os
import random
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.config import JobConfig, load_config
from coordinator.demo.race_function import count_clicks_random

__all__ = [
    "HOSTS",
    "WAYS",
    "RaceBatch",
    "RaceInput",
    "AffinityWay",
    "SparkWay",
    "race_config",
    "spark_state_conf",
]

HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
WAYS = ("affinity", "spark")
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
INPUT_SCHEMA = "user string, value long, pad long"
OUTPUT_SCHEMA = "user string, clicks long, total long"
STATE_SCHEMA = "clicks long, total long, blob string"
LOCALITY_WAIT = "30s"

Rows = list[tuple[Any, ...]]


def spark_state_conf(partitions: int) -> dict[str, str]:
    """Spark's stateful operator: RocksDB state store, changelog checkpointing, ``partitions``."""
    return {
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB,
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.shuffle.partitions": str(partitions),
    }


def race_config(
    zk_hosts: str, workdir: Path, tasks: int, name: str = "race", topic: str | None = None
) -> JobConfig:
    """The affinity side's job: one input partition, ``tasks`` tasks (the elasticity factor: a
    power of two); or, with ``topic``, the Kafka topic of ``tasks`` partitions, one task each."""
    if topic is None:
        inputs = [{"system": "spark", "stream": "clicks", "partitions": 1}]
        factor = tasks
    else:
        inputs, factor = [{"system": "kafka", "stream": topic, "partitions": tasks}], 1
    return load_config(
        data={
            "job": {"name": name, "id": "1", "run_id": "r1"},
            "zookeeper": {"connect": zk_hosts, "root": "/affinity-race"},
            "inputs": inputs,
            "ssp_grouper": {"name": "group-by-partition", "options": {"elasticity_factor": factor}},
            "grouper": {"name": "host-affinity"},
            "coordinator": {
                "debounce_ms": 200,
                "debounce_max_ms": 2000,
                "barrier_timeout_ms": 20000,
                "processor_grace_ms": 0,
            },
            "state": {
                "checkpoint_dir": str(workdir / "affinity" / "durable"),
                "local_dir": str(workdir / "affinity" / "local"),
            },
            # the demo's output is its table: the embedded coordinator logs errors only
            "logging": {"level": "error"},
        },
        environ={},
    )


@dataclass(frozen=True)
class RaceInput:
    """The file source's input. Batch 0 touches every user once (it fills the state: ``users``
    x ``pad`` characters); batch ``b`` > 0 is ``rows`` clicks drawn from ``(seed, b)``."""

    directory: Path
    users: int = 200
    rows: int = 200
    pad: int = 1_000
    seed: int = 7

    def batch(self, b: int) -> list[dict[str, Any]]:
        rng = random.Random(f"{self.seed}/{b}")
        users = (
            range(self.users) if b == 0 else (rng.randrange(self.users) for _ in range(self.rows))
        )
        return [{"user": f"u{u:06d}", "value": rng.randint(1, 9), "pad": self.pad} for u in users]

    def folder(self, way: str) -> Path:
        """The directory ``way``'s query reads (each way its own copy of the same files, so
        the two never run a batch at the same time)."""
        return self.directory / way

    def drop(self, b: int, way: str) -> None:
        """Write batch ``b``'s file for ``way`` atomically (a hidden name, then a rename)."""
        folder = self.folder(way)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".clicks-{b:06d}.json.tmp"
        tmp.write_text("".join(json.dumps(row) + "\n" for row in self.batch(b)))
        os.replace(tmp, folder / f"clicks-{b:06d}.json")

    def reference(self, batches: Iterable[int]) -> dict[int, Rows]:
        """Batch -> sorted output rows ``(user, clicks, total)``, computed in one process."""
        state: dict[str, tuple[int, int]] = {}
        out: dict[int, Rows] = {}
        for b in batches:
            touched = set()
            for row in self.batch(b):
                clicks, total = state.get(row["user"], (0, 0))
                state[row["user"]] = (clicks + 1, total + row["value"])
                touched.add(row["user"])
            out[b] = sorted((u, *state[u]) for u in touched)
        return out


@dataclass(frozen=True)
class RaceBatch:
    """One batch of one way."""

    batch: int
    phase: str
    seconds: float
    bytes_loaded: int
    rows_out: int
    tasks: int  # tasks (stores) that had a state to find
    warm: int  # of those, the ones whose state was where they ran: nothing loaded
    rows_in: int = 0  # the batch's input rows (affinity's count)
    driver_rows: int = 0  # the batch's rows through the driver (affinity: 0)
    shuffle_bytes: int = 0  # shuffle bytes written and read while the way ran the race batch

    @property
    def warm_ratio(self) -> float:
        return self.warm / self.tasks if self.tasks else 1.0


def _durations(query: Any, after: int) -> dict[int, float]:
    """Batch id -> trigger duration (s) of the query's progress reports after batch ``after``."""
    return {
        int(p["batchId"]): p["durationMs"].get("triggerExecution", 0) / 1000
        for p in query.recentProgress
        if int(p["batchId"]) > after and p.get("numInputRows", 0) > 0
    }


class SparkWay:
    """Spark's own operator over the input: ``groupBy("user").applyInPandasWithState``."""

    name = "spark"

    def __init__(self, source: RaceInput, checkpoint: Path, partitions: int) -> None:
        self.source, self.checkpoint, self.partitions = source, checkpoint, partitions
        self.outputs: dict[int, Rows] = {}
        self.query: Any = None
        self.last = -1

    def stream(self, session: Any) -> Any:
        """The clicks: the file source, one file a trigger."""
        return (
            session.readStream.schema(INPUT_SCHEMA)
            .option("maxFilesPerTrigger", 1)
            .json(str(self.source.folder(self.name)))
        )

    def stateful(self, grouped: Any) -> Any:
        """Spark's stateful operator over the clicks grouped by user."""
        return grouped.applyInPandasWithState(
            count_clicks_random, OUTPUT_SCHEMA, STATE_SCHEMA, "update", "NoTimeout"
        )

    def start(self, session: Any) -> None:
        self.query = (
            self.stateful(self.stream(session).groupBy("user"))
            .writeStream.outputMode("update")
            .foreachBatch(self._sink)
            .option("checkpointLocation", str(self.checkpoint))
            .start()
        )

    def _sink(self, df: Any, batch_id: int) -> None:
        self.outputs[int(batch_id)] = sorted(tuple(r) for r in df.collect())

    def run(self, phase: str) -> list[RaceBatch]:
        """Run what the source has; one figure per batch that had input (the query's no-data
        triggers report progress too)."""
        self.query.processAllAvailable()
        progress = [
            p
            for p in self.query.recentProgress
            if int(p["batchId"]) > self.last and p.get("numInputRows", 0) > 0
        ]
        with (self.checkpoint.parent / "spark-progress.jsonl").open("a") as log:
            log.writelines(json.dumps(p, default=str) + "\n" for p in progress)
        out = [self._figures(p, phase) for p in progress if p.get("stateOperators")]
        self.last = max([self.last, *(int(p["batchId"]) for p in progress)])
        return out

    def _figures(self, progress: dict[str, Any], phase: str) -> RaceBatch:
        batch = int(progress["batchId"])
        metrics = progress["stateOperators"][0].get("customMetrics", {})
        loaded = int(metrics.get("rocksdbNumLoadedFromDfs", 0))
        replayed = int(metrics.get("rocksdbNumReplayChangelogFiles", 0))
        # the provider keeps the last load's figure on a store that loads nothing (and a
        # background snapshot upload overwrites it): only a batch that loaded stores copied
        copied = int(metrics.get("rocksdbBytesCopied", 0)) if loaded else 0
        return RaceBatch(
            batch=batch,
            phase=phase,
            seconds=progress["durationMs"].get("triggerExecution", 0) / 1000,
            bytes_loaded=copied + self.changelog_bytes(batch, replayed, loaded),
            rows_out=len(self.outputs.get(batch, [])),
            tasks=self.partitions,
            warm=max(0, self.partitions - loaded),
        )

    def changelog_bytes(self, batch: int, replayed: int, loaded: int) -> int:
        """Bytes of the changelog files the stores loading version ``batch`` replayed."""
        if replayed == 0:
            return 0
        sizes: list[int] = []
        for store in sorted((self.checkpoint / "state" / "0").glob("[0-9]*")):
            snapshots = [int(p.stem) for p in store.glob("*.zip") if int(p.stem) <= batch]
            first = max(snapshots, default=0) + 1
            for version in range(first, batch + 1):
                path = store / f"{version}.changelog"
                if path.exists():
                    sizes.append(path.stat().st_size)
        if not sizes:
            return 0
        if loaded >= self.partitions:
            return sum(sizes)
        return round(replayed * statistics.fmean(sizes))

    def stop(self) -> None:
        if self.query is not None:
            self.query.stop()
            self.query = None


class AffinityWay:
    """The same function through ``stateful_foreach_batch`` (the driver member and an embedded
    coordinator on the race's ZooKeeper)."""

    name = "affinity"

    def __init__(self, source: RaceInput, checkpoint: Path, config: JobConfig) -> None:
        self.source, self.checkpoint, self.config = source, checkpoint, config
        self.outputs: dict[int, Rows] = {}
        self.query: Any = None
        self.handler: Any = None
        self.session: Any = None
        self.last = -1
        self.assignments: list[dict[str, str]] = []  # task -> processor, per version seen
        self.versions: set[int] = set()  # job-model versions the batches ran under

    def make_handler(self) -> Any:
        """The ``foreachBatch`` handler running the race's function."""
        from coordinator.streaming import stateful_foreach_batch

        return stateful_foreach_batch(
            count_clicks_random,
            key_columns=["user"],
            output_schema=OUTPUT_SCHEMA,
            state_schema=STATE_SCHEMA,
            sink=self._sink,
            config=self.config,
        )

    def start(self, session: Any) -> None:
        self.session = session
        self.handler = self.make_handler()
        stream = (
            session.readStream.schema(INPUT_SCHEMA)
            .option("maxFilesPerTrigger", 1)
            .json(str(self.source.folder(self.name)))
        )
        self.query = (
            stream.writeStream.foreachBatch(self.handler)
            .option("checkpointLocation", str(self.checkpoint))
            .start()
        )

    def _sink(self, df: Any, batch_id: int) -> None:
        self.outputs[int(batch_id)] = sorted(tuple(r) for r in df.collect())

    def run(self, phase: str) -> list[RaceBatch]:
        """Run what the source has; one figure per batch not reported yet (the query may have
        started a batch on its own before)."""
        self.query.processAllAvailable()
        return self.collect(phase)

    def collect(self, phase: str) -> list[RaceBatch]:
        """One figure per batch the query ran since the last call."""
        durations = _durations(self.query, self.last)
        reports = [r for r in self.handler.reports if r.batch > self.last]
        self.last = max([self.last, *(r.batch for r in reports)])
        self._note_assignment()
        self.versions.update(r.version for r in reports)
        return [self.race_batch(r, phase, durations.get(r.batch, r.seconds)) for r in reports]

    @staticmethod
    def race_batch(report: Any, phase: str, seconds: float) -> RaceBatch:
        """A batch report as the race's figures."""
        return RaceBatch(
            batch=report.batch,
            phase=phase,
            seconds=seconds,
            bytes_loaded=report.bytes_restored,
            rows_out=report.rows_out,
            tasks=report.tasks - report.new,  # tasks that had a state to find (new: none)
            warm=report.warm,
            rows_in=report.rows_in,
            driver_rows=report.driver_rows,
        )

    def _note_assignment(self) -> None:
        driver = self.handler.start(self.session.sparkContext)
        current = dict(driver.in_force(30.0).task_to_processor)
        if not self.assignments or self.assignments[-1] != current:
            self.assignments.append(current)

    def stop(self) -> None:
        if self.query is not None:
            self.query.stop()
            self.query = None
        if self.handler is not None:
            self.handler.close()
