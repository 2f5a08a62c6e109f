"""The one Kafka launcher: a private, real broker for the demo, the tests and the benchmarks.

:class:`KafkaBroker` is one Apache Kafka node in KRaft mode (``process.roles=broker,controller``,
no ZooKeeper) on free 127.0.0.1 ports, in its own work directory (``data/``,
``server.properties``, ``log4j2.properties``, ``server.log``). Its jars are Maven Central's
(:data:`locality.spark.maven.KAFKA_BROKER`, fetched once into the jar cache by ``make kafka``);
it runs as ``java -cp '<jars>/*' kafka.Kafka server.properties``, no distribution's scripts.
The first start formats the storage (``kafka.tools.StorageTool format``, a new cluster id);
later starts reuse it. It is ready when a Metadata request lists the broker (it is unfenced:
topics can be created). It stops with SIGTERM (SIGKILL if it lingers), dies with
:meth:`~KafkaBroker.kill` (SIGKILL, a crash) and restarts on the same data and ports::

    with KafkaBroker(workdir) as kafka:
        kafka.create_topic("events", partitions=4)
        ...                           # clients use kafka.bootstrap_servers
        kafka.kill(); kafka.start()   # kill -9 and restart: the records are still there
        kafka.add_partitions("events", 6)

Settings favour a small, fast single node (one partition for the internal topics, replication
factor 1, no automatic topic creation); ``settings`` overrides or adds ``server.properties``
lines. The process helpers are :mod:`coordinator.launchers.processes`; the topic operations are
:mod:`locality.spark.kafka.admin` (confluent-kafka, imported when called).
"""

from __future__ import annotations

import base64
import socket
import struct
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from coordinator.launchers.processes import (
    LocalDaemon,
    ProcessExited,
    free_port,
    wait_until,
)
from locality.spark.maven import KAFKA_BROKER, MavenFetchFailed, jars

__all__ = ["QUICK_START", "KafkaBroker", "KafkaUnavailable", "live_brokers", "random_cluster_id"]

MAIN_CLASS = "kafka.Kafka"
#: The broker's default JVM options: the C1 compiler alone starts it with about half the CPU
#: (1.9 s instead of 3.3 s until ready, measured here); pass ``jvm_options=()`` for a broker that
#: runs long and hard (C2's faster code).
QUICK_START = ("-XX:TieredStopAtLevel=1",)
STORAGE_TOOL = "kafka.tools.StorageTool"
NODE_ID = 1
_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = out
logger.server.name = kafka.server
logger.server.level = info
"""


class KafkaUnavailable(RuntimeError):
    """The broker could not be started (jars missing, startup failed or timed out)."""


def random_cluster_id() -> str:
    """A new KRaft cluster id: 16 random bytes, URL-safe base64 without padding (as
    ``kafka-storage random-uuid``, which also avoids ids that start with ``-``)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(left)
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def live_brokers(port: int, timeout_s: float = 2.0) -> list[int]:
    """The node ids of the live (unfenced) brokers that the broker on 127.0.0.1:``port`` knows,
    from a Metadata request (version 4, no topics); raises ``OSError`` if it does not answer."""
    correlation = 7
    header = struct.pack(">hhi", 3, 4, correlation) + _string("affinity-probe")
    body = struct.pack(">i?", 0, False)  # no topics; no automatic creation
    request = header + body
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
        response = _recv_exactly(sock, size)
    got, _throttle, count = struct.unpack_from(">iii", response, 0)
    if got != correlation:
        raise ConnectionError(f"unexpected correlation id {got}")
    offset, nodes = 12, []
    for _ in range(count):
        (node_id,) = struct.unpack_from(">i", response, offset)
        (host_len,) = struct.unpack_from(">h", response, offset + 4)
        offset += 6 + host_len + 4
        (rack_len,) = struct.unpack_from(">h", response, offset)
        offset += 2 + max(rack_len, 0)
        nodes.append(node_id)
    return nodes


class KafkaBroker(LocalDaemon):
    """One single-node Kafka cluster (KRaft, combined broker and controller) in ``workdir``."""

    stop_timeout_s = 20.0

    def __init__(
        self,
        workdir: Path,
        *,
        port: int | None = None,
        controller_port: int | None = None,
        heap_mb: int = 512,
        jvm_options: Sequence[str] = QUICK_START,
        settings: Mapping[str, str] | None = None,
        startup_timeout_s: float = 90.0,
    ) -> None:
        self.workdir = Path(workdir)
        self.data_dir = self.workdir / "data"
        self.port = port or free_port()
        self.controller_port = controller_port or free_port()
        self.heap_mb = heap_mb
        self.jvm_options = tuple(jvm_options)
        self.settings = dict(settings or {})
        self.startup_timeout_s = startup_timeout_s
        super().__init__(self.workdir / "server.log")
        #: Seconds the last :meth:`start` took (format included), for the benchmarks.
        self.last_start_s: float | None = None

    @property
    def bootstrap_servers(self) -> str:
        """The client address, ``127.0.0.1:<port>``."""
        return f"127.0.0.1:{self.port}"

    def config_lines(self) -> list[str]:
        """The ``server.properties`` lines: single node, loopback, small and fast."""
        settings = {
            "process.roles": "broker,controller",
            "node.id": str(NODE_ID),
            "controller.quorum.voters": f"{NODE_ID}@127.0.0.1:{self.controller_port}",
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "auto.create.topics.enable": "false",
            "num.partitions": "1",
            "default.replication.factor": "1",
            "min.insync.replicas": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # A broker killed and restarted re-registers only once its old session expires
            # (9 s by default): 3 s, with heartbeats every 0.5 s.
            "broker.heartbeat.interval.ms": "500",
            "broker.session.timeout.ms": "3000",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            "background.threads": "2",
            "log.cleaner.threads": "1",
            "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
        }
        settings.update(self.settings)
        return [f"{key}={value}" for key, value in settings.items()]

    def _write_files(self) -> Path:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "log4j2.properties").write_text(_LOG4J2)
        config = self.workdir / "server.properties"
        config.write_text("\n".join(self.config_lines()) + "\n")
        return config

    def _java(self, main: str, *args: str, heap_mb: int, options: Sequence[str]) -> list[str]:
        try:
            class_path = f"{jars(KAFKA_BROKER)}/*"
        except MavenFetchFailed as exc:
            raise KafkaUnavailable(f"Kafka's jars are missing ({exc}); run make kafka") from None
        command = ["java", f"-Xmx{heap_mb}m", "-XX:+UseSerialGC", "-Djava.awt.headless=true"]
        command += [*options, f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}"]
        return [*command, "-cp", class_path, main, *args]

    def _format_storage(self, config: Path) -> None:
        """Format the KRaft storage once (a new cluster id); a formatted one is kept."""
        if (self.data_dir / "meta.properties").exists():
            return
        command = self._java(
            STORAGE_TOOL, "format", "--cluster-id", random_cluster_id(), "--config", str(config),
            heap_mb=128, options=QUICK_START,
        )  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise KafkaUnavailable(
                f"formatting {self.data_dir} failed:\n{(done.stdout + done.stderr)[-3000:]}"
            )

    def start(self) -> KafkaBroker:
        """Start the broker (on its existing data, if any) and wait until it serves."""
        started = time.monotonic()
        with self._lock:
            if self.running:
                return self
            config = self._write_files()
            self._format_storage(config)
            command = self._java(
                MAIN_CLASS, str(config), heap_mb=self.heap_mb, options=self.jvm_options
            )
            with self.log_path.open("ab") as log:
                try:
                    self._process = subprocess.Popen(
                        command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
                    )
                except FileNotFoundError as exc:
                    raise KafkaUnavailable(f"cannot start java: {exc}") from None
        self.wait_ready()
        self.last_start_s = time.monotonic() - started
        return self

    def wait_ready(self) -> None:
        """Wait until the broker lists itself as live; kill it if it does not in time."""
        process = self._process
        if process is None:
            raise KafkaUnavailable("Kafka is not started")
        try:
            wait_until(
                lambda: NODE_ID in live_brokers(self.port),
                process,
                self.startup_timeout_s,
                "Kafka did not list itself as a live broker",
                poll_s=0.05,
            )
        except ProcessExited:
            raise KafkaUnavailable(
                f"Kafka exited with {process.returncode}; see {self.log_path}:\n" + self._log_tail()
            ) from None
        except TimeoutError:
            self.kill()
            raise KafkaUnavailable(
                f"Kafka did not serve within {self.startup_timeout_s}s; see {self.log_path}:\n"
                + self._log_tail()
            ) from None

    def create_topic(
        self, name: str, partitions: int, *, config: Mapping[str, str] | None = None
    ) -> None:
        """Create topic ``name`` with ``partitions`` partitions (replication factor 1)."""
        from locality.spark.kafka.admin import create_topic

        create_topic(self.bootstrap_servers, name, partitions, config=config)

    def add_partitions(self, name: str, total: int) -> None:
        """Grow topic ``name`` to ``total`` partitions."""
        from locality.spark.kafka.admin import add_partitions

        add_partitions(self.bootstrap_servers, name, total)
