"""The streaming race: one ``applyInPandasWithState`` function run two ways over the same
file-source input and through the same failures, in one Spark application: Spark's own
``groupBy(...).applyInPandasWithState`` with the RocksDB state store provider (changelog
checkpointing on) and affinity's ``stateful_foreach_batch`` (:mod:`coordinator.demo.race_ways`).
``affinity demo`` and ``benchmarks/spark_streaming.py`` both run it.

:class:`StreamingRace` owns a private ZooKeeper, a standalone cluster (a master and a worker on
each of 127.0.0.2-4, one core each) and the application. Each :meth:`StreamingRace.step` drops
the next batch's file and runs both queries (alternating which goes first). Failures:

- :meth:`StreamingRace.kill_executor`: ``kill -9`` of an executor JVM (its worker starts a new
  one on the same host);
- :meth:`StreamingRace.rolling_restart`: each worker (and its executor) stopped and started
  again, one batch after each;
- :meth:`StreamingRace.restart_application`: both queries and the application stopped, a new
  application started from the same checkpoints.

``kafka=True`` reads the clicks from a topic of a real broker (:mod:`coordinator.demo.race_kafka`);
``processor=True`` runs a ``StatefulProcessor`` both ways (:mod:`coordinator.demo.race_processor`);
``pinned_source=True`` (with ``kafka=True``) adds a third way, the function over Spark's own Kafka
source with its partitions pinned; ``only=(way,)`` runs one of the ways alone.

Every process it started is stopped by :meth:`StreamingRace.stop`.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from coordinator.demo.race_kafka import (
    KafkaAffinityWay,
    KafkaRaceInput,
    KafkaSparkWay,
    PinnedSourceAffinityWay,
)
from coordinator.demo.race_processor import AffinityProcessorWay, SparkProcessorWay
from coordinator.demo.race_ways import (
    HOSTS,
    LOCALITY_WAIT,
    WAYS,
    AffinityWay,
    RaceBatch,
    RaceInput,
    SparkWay,
    race_config,
    spark_state_conf,
)
from coordinator.launchers.cluster import StandaloneCluster, spark_session
from coordinator.launchers.kafka import KafkaBroker
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from groupers.measures import tasks_moved
from locality.spark.status import shuffle_bytes

__all__ = ["RaceBatch", "RaceInput", "RaceLog", "StreamingRace"]

# an executor's log line (INFO) when a RocksDB state store of the query is loaded
STORE_LOADED = re.compile(
    r"partitionId=(\d+), storeName=default \], queryRunId=[0-9a-f-]+ \]: Loaded"
)


@dataclass
class RaceLog:
    """Every batch of every way, in order."""

    batches: dict[str, list[RaceBatch]] = field(default_factory=lambda: {w: [] for w in WAYS})

    @classmethod
    def of(cls, ways: tuple[str, ...]) -> RaceLog:
        return cls({w: [] for w in ways})

    def add(self, way: str, batches: list[RaceBatch]) -> None:
        self.batches[way].extend(batches)


class StreamingRace:
    """ZooKeeper, the cluster, the application and both queries (module docstring)."""

    def __init__(
        self,
        workdir: Path,
        source: RaceInput,
        *,
        tasks: int = 8,
        note: Callable[[str], None] = lambda message: None,
        executor_memory: str = "512m",
        kafka: bool = False,
        processor: bool = False,
        pinned_source: bool = False,
        only: tuple[str, ...] = (),
    ) -> None:
        if kafka and processor:
            raise ValueError("the race runs a processor over the file source only")
        if pinned_source and not kafka:
            raise ValueError("the pinned Kafka source way needs kafka=True")
        #: the ways, in the order the first batch runs them (``pinned_source``: a third, the
        #: function over the pinned Kafka source)
        self.names = (*WAYS, *((PinnedSourceAffinityWay.name,) if pinned_source else ()))
        if only:  # one way alone (e.g. its memory measured with nothing else in the application)
            if not set(only) <= set(self.names):
                raise ValueError(
                    f"only: {sorted(set(only) - set(self.names))} not among {self.names}"
                )
            self.names = tuple(n for n in self.names if n in only)
        self.workdir, self.source, self.tasks, self.note = workdir, source, tasks, note
        self.processor = processor
        self.executor_memory = executor_memory
        self.broker = KafkaBroker(workdir / "kafka") if kafka else None
        if self.broker is not None:  # the clicks are records of a topic on a real broker
            self.source = KafkaRaceInput(
                **{f.name: getattr(source, f.name) for f in fields(RaceInput)},
                servers=self.broker.bootstrap_servers,
                topic="clicks",
                output_topic="clicks-out",
            )
        self.zookeeper = EmbeddedZooKeeper(workdir / "zookeeper")
        self.cluster = StandaloneCluster(workdir / "spark", HOSTS, worker_memory="1g")
        self.session: Any = None
        self.log = RaceLog.of(self.names)
        self.next_batch = 0
        self.ways: dict[str, Any] = {}

    # ------------------------------------------------------------------ set-up / tear-down

    def start(self) -> None:
        for name in self.names:
            self.source.folder(name).mkdir(parents=True, exist_ok=True)
        self.note("starting ZooKeeper ...")
        self.zookeeper.start()
        self.ways = {name: way for name, way in self._ways().items() if name in self.names}
        self.note("starting the Spark cluster (master + 3 workers) ...")
        self.cluster.start()
        self._start_application()

    def _ways(self) -> dict[str, Any]:
        affinity_ckpt, spark_ckpt = (
            self.workdir / "affinity" / "spark-ckpt",
            self.workdir / "spark-ckpt",
        )
        source = self.source
        if self.broker is None or not isinstance(source, KafkaRaceInput):
            config = race_config(self.zookeeper.hosts, self.workdir, self.tasks)
            if self.processor:
                return {
                    "affinity": AffinityProcessorWay(source, affinity_ckpt, config),
                    "spark": SparkProcessorWay(source, spark_ckpt, self.tasks),
                }
            return {
                "affinity": AffinityWay(source, affinity_ckpt, config),
                "spark": SparkWay(source, spark_ckpt, self.tasks),
            }
        self.note("starting a Kafka broker (KRaft) ...")
        self.broker.start()
        for topic in (*(source.topic_of(w) for w in self.names), source.output_topic):
            self.broker.create_topic(topic, self.tasks)
        topic = source.topic_of("affinity")
        config = race_config(self.zookeeper.hosts, self.workdir, self.tasks, topic=topic)
        ways: dict[str, Any] = {
            "affinity": KafkaAffinityWay(source, affinity_ckpt, config),
            "spark": KafkaSparkWay(source, spark_ckpt, self.tasks),
        }
        if PinnedSourceAffinityWay.name in self.names:  # its own job, state and topic
            name, work = PinnedSourceAffinityWay.name, self.workdir / "pinned-source"
            config = race_config(
                self.zookeeper.hosts, work, self.tasks, name=name, topic=source.topic_of(name)
            )
            ways[name] = PinnedSourceAffinityWay(source, work / "spark-ckpt", config)
        return ways

    def _start_application(self) -> None:
        self.note("starting the application and its executors ...")
        self.session = spark_session(
            self.cluster.master_url,
            app_name="affinity-streaming-race",
            locality_wait=LOCALITY_WAIT,
            executor_memory=self.executor_memory,
            log4j_config=self.cluster.quiet_log4j_config,
            conf={**spark_state_conf(self.tasks), **self._jars()},
        )
        self.wait_executors()
        self.prime()
        for way in self.ways.values():
            way.start(self.session)

    def _jars(self) -> dict[str, str]:
        """affinity's jar, and with Kafka Spark's connector's."""
        from locality.spark.jvm import JAR_CONF_KEY, spark_jar

        if self.broker is None:
            return {}
        from locality.spark.maven import spark_jars_conf

        return {JAR_CONF_KEY: f"{spark_jar()},{spark_jars_conf()}"}

    def _stop_application(self) -> None:
        for way in self.ways.values():
            with contextlib.suppress(Exception):
                way.stop()
        if self.session is not None:
            with contextlib.suppress(Exception):
                self.session.stop()
            self.session = None

    def stop(self) -> None:
        self._stop_application()
        steps = [self.cluster.stop, self.zookeeper.stop]
        if self.broker is not None:
            steps.append(self.broker.stop)
        for step in steps:
            with contextlib.suppress(Exception):
                step()

    # ------------------------------------------------------------------ executors

    def executors(self) -> list[Any]:
        from locality.spark import SparkExecutors

        return list(SparkExecutors(self.session.sparkContext).list())

    def wait_executors(self, gone: tuple[str, ...] = ()) -> list[Any]:
        from locality.spark import SparkExecutors

        executors = SparkExecutors(self.session.sparkContext)
        return list(executors.wait_for(len(HOSTS), hosts=HOSTS, exclude=gone, timeout_s=180))

    def prime(self) -> None:
        """A no-op task on every executor (starts a new executor's Python workers, so neither
        way pays for it in its first batch)."""
        from locality.spark import run_pinned

        live = self.executors()
        run_pinned(
            self.session.sparkContext,
            dict.fromkeys((e.executor_id for e in live), None),
            {e.executor_id: e.executor_id for e in live},
            lambda task, payload: None,
            locality_wait=LOCALITY_WAIT,
        )

    # ------------------------------------------------------------------ batches and failures

    def step(self, phase: str) -> dict[str, list[RaceBatch]]:
        """Drop the next batch's file for each query in turn and run it (one at a time)."""
        order = self.names if self.next_batch % 2 == 0 else tuple(reversed(self.names))
        done: dict[str, list[RaceBatch]] = {}
        for name in order:
            self.source.drop(self.next_batch, name)
            before = shuffle_bytes(self.session.sparkContext)
            ran = self.ways[name].run(phase)
            shuffled = shuffle_bytes(self.session.sparkContext) - before
            done[name] = [replace(b, shuffle_bytes=shuffled * (i == 0)) for i, b in enumerate(ran)]
            self.log.add(name, done[name])
        self.next_batch += 1
        return done

    def spark_stores(self, executor_id: str) -> set[str]:
        """The Spark state stores (partition ids) this executor has loaded (its log)."""
        app_id = self.session.sparkContext.applicationId
        found: set[str] = set()
        for log in self.cluster.workdir.glob(f"work-*/{app_id}/{executor_id}/stderr"):
            found |= set(STORE_LOADED.findall(log.read_text(errors="replace")))
        return found

    def kill_executor(self) -> str:
        """``kill -9`` of the executor holding the most Spark state stores (affinity's tasks
        are on every executor)."""
        victim = max(self.executors(), key=lambda e: len(self.spark_stores(e.executor_id)))
        host = victim.host
        self.note(f"killing executor {victim.executor_id} on {host} (kill -9) ...")
        self.cluster.kill_executor(self.session.sparkContext.applicationId, victim.executor_id)
        self.wait_executors(gone=(victim.executor_id,))
        self.prime()
        return str(victim.executor_id)

    def restart_worker(self, host: str) -> None:
        gone = tuple(e.executor_id for e in self.executors() if e.host == host)
        self.note(f"restarting the worker on {host} ...")
        self.cluster.kill_worker(host)
        self.cluster.start_worker(host)
        self.wait_executors(gone=gone)
        self.prime()

    def rolling_restart(self, phase: str) -> None:
        """Each worker restarted in turn, a batch after each."""
        for host in HOSTS:
            self.restart_worker(host)
            self.step(phase)

    def restart_application(self) -> None:
        self.note("restarting the application (same checkpoints) ...")
        self._stop_application()
        self._start_application()

    # ------------------------------------------------------------------ results

    def outputs_equal(self) -> bool:
        """Every way's outputs equal the single-process reference, batch by batch."""
        reference = self.source.reference(range(self.next_batch))
        return all(self.ways[w].outputs == reference for w in self.names)

    def versions(self) -> list[int]:
        return sorted(self.ways["affinity"].versions)

    def tasks_moved(self) -> int:
        seen = self.ways["affinity"].assignments
        return sum(tasks_moved(a, b) for a, b in itertools.pairwise(seen))
