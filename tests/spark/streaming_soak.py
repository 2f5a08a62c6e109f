"""The streaming fault soak's machinery (``tests/spark/test_streaming_soak.py`` runs it briefly,
``benchmarks/streaming_soak.py`` for minutes): two stateful queries on the 3-worker cluster, in
an application with ``spark.speculation`` on, under Spark's real failure modes, checked after
every batch against a single-process reference.

- **The file query**: ``stateful_foreach_batch`` over a file source of words (one file a batch);
- **the Kafka query**: ``stateful_kafka_query`` over a topic of keyed records (Spark's Kafka
  source pinned, one ``availableNow`` run of one batch at a time).

Both count the rows of each key (the state) and emit each touched key's count. After every
batch :meth:`StreamingSoak.check` compares:

- the **state**, read back from durable storage alone along the latest commit's chain heads (as
  a restore reads it: a committed file missing shows here even while local copies hide it), with
  the reference counts of every record up to the commit: each record counted once;
- every **output** a batch id delivered to the sink (a batch may be delivered again after a
  failure: at least once) with the reference output of that batch;
- each query's **output topic** (``delivery="exactly-once"``: the Kafka query's, and the file
  query's through ``stateful_foreach_batch(output_topic=...)``), read committed: every
  reference output record of every batch exactly once (0 duplicates, 0 missing).

A mismatch is a **violation** (recorded, and the soak goes on). The faults
(:data:`FAULTS`), each applied around one batch of one query:

=====================  ==========================================================================
``executor_kill``      kill an executor JVM while one of its tasks runs the batch
``worker_kill``        kill a worker and its executors, run the batch, start the worker again
``slow_attempt``       a task's first attempt stalls: Spark's speculation runs a copy beside it
``sink_crash``         the sink fails after reading the output, before the commit (a driver
                       killed there); the query is started again and Spark runs the batch again
``crash_after_commit`` the driver stops right after affinity's commit, before Spark's own; the
                       query is started again and Spark runs the committed batch again (a replay)
``zookeeper_restart``  ZooKeeper killed and started again before the batch
``broker_restart``     the Kafka broker killed and started again before the batch
``app_restart``        a new Spark application (new executors), the queries started again
``fresh_checkpoint``   the file query started with a new Spark checkpoint location: refused
                       (its batch 0 is below the state's latest commit), then started again
                       with its own
=====================  ==========================================================================
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark import cloudpickle
from spark_app import WORKER_HOSTS, SparkApp
from stalls import kill_when_marked, stalls_once

from coordinator.config import JobConfig, load_config
from coordinator.streaming import stateful_foreach_batch
from coordinator.streaming.kafka_query import KafkaQuery, stateful_kafka_query
from coordinator.streaming.query import StatefulQuery
from coordinator.streaming.runtime import QueryRuntime
from locality.spark.kafka import OffsetRange, end_offsets, read_ranges, write_records
from locality.spark.state import DirectoryStateStorage, latest_commit
from locality.spark.state.objectspace import ObjectSpace

cloudpickle.register_pickle_by_value(sys.modules[__name__])

FAULTS = {  # kind -> weight in a random soak
    "executor_kill": 3,
    "worker_kill": 1,
    "slow_attempt": 3,
    "sink_crash": 2,
    "crash_after_commit": 2,
    "zookeeper_restart": 1,
    "broker_restart": 1,
    "app_restart": 1,
    "fresh_checkpoint": 1,
}
FILE_ONLY = {"fresh_checkpoint"}
KAFKA_ONLY = {"broker_restart"}
SPECULATION = {
    "spark.speculation": "true",
    "spark.speculation.interval": "200ms",
    "spark.speculation.multiplier": "1.5",
    "spark.speculation.quantile": "0.5",
    "spark.speculation.minTaskRuntime": "2s",
}
TASKS = 4
MAXP = 64
SLOW = "slow"


class InjectedCrash(RuntimeError):
    """A fault the soak raised on purpose (the driver 'dies' here)."""


def slowable(control: str) -> Callable[..., Iterator[Any]]:
    """The soak's function: count each key's rows; while ``<control>/slow`` exists the first
    attempt of the task holding key ``slow`` stalls (speculation copies it)."""

    def count(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
        import os
        import time as clock

        from pyspark import TaskContext

        rows = sum(len(pdf) for pdf in pdfs)
        context = TaskContext.get()
        stall = os.path.exists(os.path.join(control, "slow"))
        if stall and key[0] == SLOW and context is not None and context.attemptNumber() == 0:
            clock.sleep(10)
        n = (state.get[0] if state.exists else 0) + rows
        state.update((n,))
        yield pd.DataFrame({"key": [str(key[0])], "n": [n]})

    return count


def soak_config(zk_hosts: str, tmp: Path, name: str, system: str, stream: str) -> JobConfig:
    return load_config(
        data={
            "job": {"name": name, "id": "1", "run_id": "r1"},
            "zookeeper": {"connect": zk_hosts, "root": "/affinity-soak"},
            "inputs": [{"system": system, "stream": stream, "partitions": TASKS}],
            "grouper": {"name": "host-affinity"},
            "coordinator": {"debounce_ms": 100, "debounce_max_ms": 1000},
            "state": {
                "checkpoint_dir": str(tmp / name / "durable"),
                "local_dir": str(tmp / name / "local"),
                "max_parallelism": MAXP,
            },
        },
        environ={},
    )


def durable_counts(config: JobConfig) -> tuple[int, dict[str, int]]:
    """(the latest committed batch, key -> count) read from durable storage alone, along the
    latest commit's chain heads (as a restore reads it)."""
    storage = DirectoryStateStorage(config.state.checkpoint_dir)
    commit = latest_commit(storage)
    if commit is None:
        return -1, {}
    groups, maxp = range(config.state.max_parallelism), config.state.max_parallelism
    space, _ = ObjectSpace.load(storage, groups, max_parallelism=maxp, heads=commit.heads)
    counts: dict[str, int] = {}
    for g in space.key_groups:
        group = space.group(g)
        if "state" in group:
            for key, value in group.get_map("state").items():
                counts[str(json.loads(key)[0])] = int(value[0])  # type: ignore[index]
    return commit.batch, counts


def keys_of(batch: int) -> list[str]:
    return [f"k{(batch * 7 + i) % 31:02d}" for i in range(30)] + [SLOW] * (batch % 3 + 1)


@dataclass
class Deliveries:
    """What the sink got: every delivery of every batch id (a replayed batch: several)."""

    outputs: dict[int, list[list[tuple[str, int]]]] = field(default_factory=dict)
    fail_next: bool = False

    def __call__(self, df: Any, batch: int) -> None:
        rows = sorted((str(k), int(n)) for k, n in df.collect())
        if self.fail_next:
            self.fail_next = False
            raise InjectedCrash(f"the sink crashed in batch {batch}")
        self.outputs.setdefault(batch, []).append(rows)


def reference_outputs(
    batches: list[list[str]],
) -> tuple[list[list[tuple[str, int]]], list[Counter[str]]]:
    """Per batch: its output and the counts after it."""
    totals: Counter[str] = Counter()
    outputs, after = [], []
    for keys in batches:
        totals.update(keys)
        outputs.append(sorted((k, totals[k]) for k in set(keys)))
        after.append(Counter(totals))
    return outputs, after


def crash_after_commit(handler: QueryRuntime) -> None:
    """The handler's next commit is followed by the driver 'dying' (before Spark's commit)."""
    if handler.commits is None:  # a handler that has run no batch yet opens its log first
        from pyspark import SparkContext

        handler.start(SparkContext.getOrCreate())
    commits = handler.commits
    assert commits is not None
    real = commits.commit

    def commit_then_crash(record: Any) -> Any:
        commits.commit = real  # type: ignore[method-assign]
        real(record)
        raise InjectedCrash(f"the driver died after affinity's commit of batch {record.batch}")

    commits.commit = commit_then_crash  # type: ignore[method-assign]


class FileWorkload:
    """The file query: one file of :func:`keys_of` a batch."""

    name = "file"

    def __init__(self, soak: StreamingSoak, output_topic: str) -> None:
        self.soak = soak
        self.output_topic = output_topic  # stateful_foreach_batch's exactly-once Kafka output
        self.root = soak.tmp / "file-query"
        self.inbox = self.root / "inbox"
        self.inbox.mkdir(parents=True, exist_ok=True)
        self.config = soak_config(soak.zk_hosts, soak.tmp, "soak-files", "spark", "keys")
        self.checkpoint = self.root / "spark-checkpoint"
        self.sink = Deliveries()
        self.fed: list[list[str]] = []
        self.handler: StatefulQuery | None = None
        self.query: Any = None

    def start(self, checkpoint: Path | None = None) -> None:
        session = self.soak.app.session
        assert session is not None
        self.handler = stateful_foreach_batch(
            self.soak.function, key_columns=["key"], output_schema="key string, n long",
            state_schema="n long", sink=self.sink, config=self.config,
            output_topic=self.output_topic, kafka=self.soak.broker_servers,
        )  # fmt: skip
        stream = session.readStream.schema("key string").option("maxFilesPerTrigger", 1)
        self.query = (
            stream.json(str(self.inbox))
            .writeStream.foreachBatch(self.handler)
            .option("checkpointLocation", str(checkpoint or self.checkpoint))
            .start()
        )

    def stop(self) -> None:
        if self.query is not None:
            with contextlib.suppress(Exception):  # a query that failed already
                self.query.stop()
            self.query = None
        if self.handler is not None:
            self.handler.close()
            self.handler = None

    def restart(self, checkpoint: Path | None = None) -> None:
        self.stop()
        self.start(checkpoint)

    def batch(self) -> None:
        index = len(self.fed)
        self.fed.append(keys_of(index))
        text = "".join(json.dumps({"key": k}) + "\n" for k in self.fed[-1])
        (self.inbox / f"{index:05d}.json").write_text(text)
        self.query.processAllAvailable()

    def recover(self) -> None:
        """The driver 'died' in a batch: start the query again; Spark runs the batch again."""
        self.restart()
        self.query.processAllAvailable()

    def check(self) -> list[str]:
        committed, counts = durable_counts(self.config)
        outputs, after = reference_outputs(self.fed)
        found = _state_problems(self.name, committed, len(self.fed) - 1, counts, after)
        found += topic_problems(self.name, self.soak.broker_servers, self.output_topic, outputs)
        return found + _output_problems(self.name, self.sink, outputs)


class KafkaWorkload:
    """The Kafka query: :func:`keys_of` records produced a batch, keyed."""

    name = "kafka"

    def __init__(self, soak: StreamingSoak, topic: str, output_topic: str) -> None:
        self.soak = soak
        self.topic = topic
        self.output_topic = output_topic  # exactly once: each batch's output once, committed
        self.config = soak_config(soak.zk_hosts, soak.tmp, "soak-kafka", "kafka", topic)
        self.sink = Deliveries()
        self.produced = 0
        self.ends: dict[int, dict[str, int]] = {}
        self.query: KafkaQuery | None = None

    @property
    def handler(self) -> StatefulQuery | None:
        return self.query.handler if self.query is not None else None

    def start(self) -> None:
        self.query = stateful_kafka_query(
            self.soak.function, spark=self.soak.app.session, kafka=self.soak.broker_servers,
            output_schema="key string, n long", state_schema="n long", config=self.config,
            sink=self.sink, output_topic=self.output_topic,
        )  # fmt: skip

    def stop(self) -> None:
        if self.query is not None:
            self.query.close()
            self.query = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def batch(self) -> None:
        keys = keys_of(self.produced)
        self.produced += 1
        frame = pd.DataFrame({"key": keys, "value": ["1"] * len(keys)})
        write_records(self.soak.broker_servers, self.topic, frame)
        self.recover()

    def recover(self) -> None:
        """Run the batch again in the same driver (a commit the crash followed is recorded
        first): Spark runs it from the ranges in its offset log; one this driver committed
        already is done (no report: nothing runs)."""
        assert self.query is not None
        latest = self._record_latest()
        report = self.query.run_batch()
        assert self._record_latest() == (latest if report is None else report.batch)

    def _record_latest(self) -> int:
        """Record the latest commit's offsets (the reference's batch boundaries)."""
        commit = latest_commit(DirectoryStateStorage(self.config.state.checkpoint_dir))
        if commit is None:
            return -1
        self.ends[commit.batch] = dict(commit.offsets)
        return commit.batch

    def _records(self, upto: dict[str, int], since: dict[str, int]) -> list[str]:
        ranges = [
            OffsetRange(self.topic, int(name.rsplit("-", 1)[1]), since.get(name, 0), end)
            for name, end in sorted(upto.items())
        ]
        table = read_ranges(self.soak.broker_servers, ranges)
        return [bytes(k).decode() for k in table.column("key").to_pylist()]

    def check(self) -> list[str]:
        committed, counts = durable_counts(self.config)
        self._record_latest()
        if sorted(self.ends) != list(range(len(self.ends))):
            return [f"{self.name}: batch ids not consecutive: {sorted(self.ends)}"]
        batches: list[list[str]] = []
        before: dict[str, int] = {}
        for b in sorted(self.ends):
            batches.append(self._records(self.ends[b], before))
            before = self.ends[b]
        outputs, after = reference_outputs(batches)
        latest = max(self.ends, default=-1)
        found = _state_problems(self.name, committed, latest, counts, after)
        found += topic_problems(self.name, self.soak.broker_servers, self.output_topic, outputs)
        return found + _output_problems(self.name, self.sink, outputs)


def published(servers: str, topic: str) -> Counter[tuple[str, int]]:
    """(key, count) of every record a read_committed reader sees in ``topic``."""
    ends = end_offsets(servers, [topic])
    ranges = [OffsetRange(p.topic, p.partition, 0, end) for p, end in sorted(ends.items())]
    table = read_ranges(servers, ranges)
    rows = [json.loads(v) for v in table.column("value").to_pylist()]
    return Counter((str(r["key"]), int(r["n"])) for r in rows)


def topic_problems(
    name: str, servers: str, topic: str, outputs: list[list[tuple[str, int]]]
) -> list[str]:
    """Each reference output record in ``topic`` exactly once, or what differs."""
    expected: Counter[tuple[str, int]] = Counter(row for rows in outputs for row in rows)
    seen = published(servers, topic)
    if seen == expected:
        return []
    twice = sorted(k for k, n in seen.items() if n > expected.get(k, 0))
    missing = sorted(k for k, n in expected.items() if seen.get(k, 0) < n)
    return [
        f"{name}: output topic: {len(twice)} records more than once {twice[:3]}, "
        f"{len(missing)} missing {missing[:3]}"
    ]


def _state_problems(
    name: str,
    committed: int,
    expected_batch: int,
    counts: dict[str, int],
    after: list[Counter[str]],
) -> list[str]:
    if committed != expected_batch:
        return [f"{name}: the latest commit is batch {committed}, expected {expected_batch}"]
    expected = dict(after[committed]) if committed >= 0 else {}
    if counts != expected:
        wrong = sorted(k for k in set(counts) | set(expected) if counts.get(k) != expected.get(k))
        sample = {k: (counts.get(k), expected.get(k)) for k in wrong[:3]}
        return [f"{name}: durable state after batch {committed} differs for {wrong[:5]} {sample}"]
    return []


def _output_problems(
    name: str, sink: Deliveries, outputs: list[list[tuple[str, int]]]
) -> list[str]:
    problems = []
    for batch in range(len(outputs)):
        deliveries = sink.outputs.get(batch, [])
        if not deliveries:
            problems.append(f"{name}: batch {batch}'s output never reached the sink")
        problems += [
            f"{name}: batch {batch} delivered {got[:3]}..., expected {outputs[batch][:3]}..."
            for got in deliveries
            if got != outputs[batch]
        ]
    return problems


class StreamingSoak:
    """Both queries on one application with speculation on; :meth:`fault` applies one fault
    around one batch of one query, :meth:`check` lists the violations (module docstring)."""

    def __init__(
        self, cluster: Any, zk: Any, broker: Any, topic: str, tmp: Path, log: Callable[[str], None]
    ) -> None:
        self.cluster, self.zk, self.broker, self.tmp, self.log = cluster, zk, broker, tmp, log
        self.output_topic = f"{topic}-out"
        self.zk_hosts = zk.hosts
        self.broker_servers = broker.bootstrap_servers
        self.control = tmp / "control"
        self.control.mkdir(parents=True, exist_ok=True)
        self.armed, self.marker = self.control / "armed", self.control / "stalled"
        self.function = stalls_once(slowable(str(self.control)), str(self.armed), str(self.marker))
        self.app = SparkApp(cluster, WORKER_HOSTS, conf=SPECULATION)
        self.workloads: dict[str, FileWorkload | KafkaWorkload] = {}
        self.topic = topic
        self.faults: Counter[str] = Counter()
        self.batches = 0

    def start(self) -> None:
        self.app.start()
        self.broker.create_topic(self.output_topic, 3)
        self.broker.create_topic(f"{self.topic}-files-out", 3)
        kafka = KafkaWorkload(self, self.topic, self.output_topic)
        files = FileWorkload(self, f"{self.topic}-files-out")
        self.workloads = {"file": files, "kafka": kafka}
        for workload in self.workloads.values():
            workload.start()

    def stop(self) -> None:
        for workload in self.workloads.values():
            workload.stop()
        self.app.stop()

    def check(self) -> list[str]:
        return [p for w in self.workloads.values() for p in w.check()]

    def fault(self, kind: str, which: str) -> list[str]:
        """Apply ``kind`` around one batch of workload ``which``; the violations after it."""
        workload = self.workloads[which]
        began = time.monotonic()
        getattr(self, f"_{kind}")(workload)
        self.faults[kind] += 1
        self.batches += 1
        found = self.check()
        self.log(
            f"{kind:<20} {which:<6} {time.monotonic() - began:6.1f} s  {len(found)} violations"
        )
        return found

    # ------------------------------------------------------------------ the faults

    def _none(self, workload: Any) -> None:
        workload.batch()

    def _executor_kill(self, workload: Any) -> None:
        killed: list[str] = []
        self.marker.unlink(missing_ok=True)
        self.armed.touch()
        kill_when_marked(self.marker, self.cluster, self.app.app_id, killed)
        try:
            workload.batch()
        finally:
            self.armed.unlink(missing_ok=True)
        self.app.ready(exclude=tuple(killed))

    def _worker_kill(self, workload: Any) -> None:
        host = WORKER_HOSTS[self.faults["worker_kill"] % len(WORKER_HOSTS)]
        self.cluster.kill_worker(host)
        try:
            workload.batch()
        finally:
            self.cluster.start_worker(host)
        self.app.ready()

    def _slow_attempt(self, workload: Any) -> None:
        (self.control / "slow").touch()
        try:
            workload.batch()
        finally:
            (self.control / "slow").unlink(missing_ok=True)

    def _sink_crash(self, workload: Any) -> None:
        workload.sink.fail_next = True
        self._crash_and_recover(workload)

    def _crash_after_commit(self, workload: Any) -> None:
        assert workload.handler is not None
        crash_after_commit(workload.handler)
        self._crash_and_recover(workload)

    def _crash_and_recover(self, workload: Any) -> None:
        try:
            workload.batch()
        except Exception as exc:  # the Kafka query raises; the file query's stream fails
            if "InjectedCrash" not in f"{type(exc).__name__}: {exc}":
                raise
        else:
            if workload.name == "kafka":
                raise AssertionError("the injected crash did not reach the Kafka query")
        workload.recover()

    def _zookeeper_restart(self, workload: Any) -> None:
        self.zk.restart(down_s=1.0)
        workload.batch()

    def _broker_restart(self, workload: Any) -> None:
        self.broker.restart()
        workload.batch()

    def _app_restart(self, workload: Any) -> None:
        for each in self.workloads.values():
            each.stop()
        self.app.restart()
        for each in self.workloads.values():
            each.start()
        workload.batch()

    def _fresh_checkpoint(self, workload: Any) -> None:
        assert isinstance(workload, FileWorkload)
        fresh = self.tmp / f"fresh-checkpoint-{self.faults['fresh_checkpoint']}"
        workload.restart(checkpoint=fresh)
        try:
            workload.query.processAllAvailable()
        except Exception as exc:
            if "is below batch" not in str(exc):
                raise
        else:
            if workload.fed:
                raise AssertionError("a fresh checkpoint location was not refused")
        workload.restart()
        workload.batch()
