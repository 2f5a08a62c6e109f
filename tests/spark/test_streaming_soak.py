"""The streaming fault soak, short (``benchmarks/streaming_soak.py`` runs it for minutes): the file
query and the Kafka query on the 3-worker cluster, with speculation on, through every fault kind
of :data:`streaming_soak.FAULTS` once or twice, checked after every batch against a
single-process reference (state read back as a restore reads it, every delivery of every batch);
0 violations."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from spark_app import stop_active_session
from streaming_soak import FAULTS, TASKS, StreamingSoak

from coordinator.launchers.kafka import KafkaBroker
from coordinator.launchers.zookeeper import EmbeddedZooKeeper

pytestmark = pytest.mark.spark

PLAN = [
    ("none", "file"),
    ("none", "kafka"),
    ("executor_kill", "file"),
    ("executor_kill", "kafka"),
    ("slow_attempt", "file"),
    ("slow_attempt", "kafka"),
    ("sink_crash", "file"),
    ("sink_crash", "kafka"),
    ("crash_after_commit", "file"),
    ("crash_after_commit", "kafka"),
    ("zookeeper_restart", "file"),
    ("broker_restart", "kafka"),
    ("fresh_checkpoint", "file"),
    ("worker_kill", "kafka"),
    ("app_restart", "file"),
    ("none", "kafka"),
]


@pytest.fixture
def soak(
    spark_cluster: Any,
    zk_private_server: EmbeddedZooKeeper,
    kafka_broker: KafkaBroker,
    kafka_topic: Callable[..., str],
    tmp_path: Path,
) -> Iterator[StreamingSoak]:
    stop_active_session()  # an application of its own, with speculation on
    run = StreamingSoak(
        spark_cluster, zk_private_server, kafka_broker, kafka_topic(TASKS), tmp_path, print
    )
    run.start()
    try:
        yield run
    finally:
        run.stop()


def test_every_fault_kind_keeps_state_exact_and_output_at_least_once(
    soak: StreamingSoak,
) -> None:
    assert {kind for kind, _ in PLAN} - {"none"} == set(FAULTS)
    violations = [(kind, which, v) for kind, which in PLAN for v in soak.fault(kind, which)]
    assert violations == []
    file_query = soak.workloads["file"]
    # the replays really happened: a batch delivered twice (crash after the commit)
    assert any(len(d) > 1 for d in file_query.sink.outputs.values())
