"""The Kafka sink on a real broker: a DataFrame's rows read back as records, bad input refused
before anything is written, transactions committed or aborted, and a re-run that fences the
earlier attempt (alive, or killed mid-transaction)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Callable

import pandas as pd
import pyarrow as pa
import pytest

from coordinator.launchers.kafka import KafkaBroker
from locality.spark.kafka import (
    KafkaClientConfig,
    KafkaPartition,
    KafkaWriteError,
    OffsetRange,
    ProducerFenced,
    TransactionalWriter,
    end_offsets,
    read_ranges,
    write_records,
)

pytestmark = pytest.mark.kafka


def _read_all(client: KafkaClientConfig | str, topic: str) -> pa.Table:
    ends = end_offsets(client, [topic])
    return read_ranges(client, [OffsetRange(p.topic, p.partition, 0, e) for p, e in ends.items()])


def _pairs(table: pa.Table) -> Counter[tuple[bytes | None, bytes | None]]:
    return Counter(
        zip(table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True)
    )


def test_rows_are_read_back_as_records(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    servers, topic = kafka_broker.bootstrap_servers, kafka_topic(3)
    rows = pd.DataFrame(
        {
            "key": [f"k{i % 13}" for i in range(3_000)] + [None, "k1"],
            "value": [f"v{i}" for i in range(3_000)] + ["no key", None],  # None: a tombstone
            "other": range(3_002),
        }
    )
    assert write_records(servers, topic, rows) == 3_002
    table = _read_all(servers, topic)
    expected = Counter(
        (None if k is None else k.encode(), None if v is None else v.encode())
        for k, v in zip(rows["key"], rows["value"], strict=True)
    )
    assert _pairs(table) == expected
    partitions_of_key: dict[bytes, set[int]] = {}
    keys, parts = table.column("key").to_pylist(), table.column("partition").to_pylist()
    for key, part in zip(keys, parts, strict=True):
        if key is not None:
            partitions_of_key.setdefault(key, set()).add(part)
    assert all(len(parts) == 1 for parts in partitions_of_key.values())
    assert len({p for parts in partitions_of_key.values() for p in parts}) > 1

    arrow = pa.table({"k": [b"\x00\xff", b"x"], "v": [b"\x01", b"y"], "p": [2, 0]})
    write_records(servers, topic, arrow, key_column="k", value_column="v", partition_column="p")
    by_partition = {
        p.partition: read_ranges(servers, [OffsetRange(topic, p.partition, e - 1, e)])
        for p, e in end_offsets(servers, [topic]).items()
        if p.partition in (0, 2)
    }
    assert by_partition[2].column("key").to_pylist() == [b"\x00\xff"]
    assert by_partition[0].column("value").to_pylist() == [b"y"]


def test_bad_input_is_refused_before_anything_is_written(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    servers, topic = kafka_broker.bootstrap_servers, kafka_topic(2)
    good = pd.DataFrame({"key": ["a", "b"], "value": ["1", "2"]})
    cases = [
        (good.rename(columns={"value": "payload"}), {}, "no value column 'value'"),
        (pd.DataFrame({"key": ["a"], "value": [1]}), {}, "value column 'value' is int64"),
        (good.assign(p=[0.5, 1.0]), {"partition_column": "p"}, "'p' is double, not an integer"),
        (
            pa.table(
                {"key": ["a", "b"], "value": ["1", "2"], "p": pa.array([0, None], pa.int32())}
            ),
            {"partition_column": "p"},
            "'p' has nulls",
        ),
    ]
    for data, options, message in cases:
        with pytest.raises(ValueError, match=message):
            write_records(servers, topic, data, **options)
    with pytest.raises(TypeError, match="cannot write list"):
        write_records(servers, topic, [("a", "1")])
    assert set(end_offsets(servers, [topic]).values()) == {0}
    with pytest.raises(KafkaWriteError, match="missing does not exist"):
        write_records(servers, f"{topic}-missing", good)
    with (
        pytest.raises(KafkaWriteError, match="missing does not exist"),
        TransactionalWriter(servers, f"{topic}-tx") as tx,
    ):
        tx.write(f"{topic}-missing", good)


def test_a_transaction_is_seen_whole_or_not_at_all(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    servers, out, audit = kafka_broker.bootstrap_servers, kafka_topic(2), kafka_topic(1)
    rows = pd.DataFrame(
        {"key": [f"k{i}" for i in range(100)], "value": [str(i) for i in range(100)]}
    )
    with TransactionalWriter(servers, f"{out}-batch-1") as tx:
        assert tx.write(out, rows) == 100
        tx.write(audit, pd.DataFrame({"key": ["batch"], "value": ["1"]}))  # same transaction
    assert _read_all(servers, out).num_rows == 100
    assert _read_all(servers, audit).column("value").to_pylist() == [b"1"]

    with pytest.raises(ZeroDivisionError), TransactionalWriter(servers, f"{out}-batch-2") as tx:
        tx.write(out, rows)
        tx.write(audit, pd.DataFrame({"key": ["batch"], "value": ["2"]}))
        tx.flush()  # the records are in the log, uncommitted
        _ = 1 / 0
    assert _read_all(servers, out).num_rows == 100  # batch 2 was aborted
    assert _read_all(servers, audit).column("value").to_pylist() == [b"1"]
    uncommitted = KafkaClientConfig(servers, {"isolation.level": "read_uncommitted"})
    assert _read_all(uncommitted, out).num_rows == 200  # ... though its records reached the log


def test_a_rerun_fences_the_earlier_attempt(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    servers, topic = kafka_broker.bootstrap_servers, kafka_topic(2)
    transactional_id = f"{topic}-task-3-batch-7"
    first = pd.DataFrame({"key": ["a", "b"], "value": ["first-1", "first-2"]})
    second = pd.DataFrame({"key": ["a", "b"], "value": ["second-1", "second-2"]})

    earlier = TransactionalWriter(servers, transactional_id).begin()  # a zombie attempt
    earlier.write(topic, first)
    earlier.flush()
    with TransactionalWriter(servers, transactional_id) as rerun:  # aborts the zombie's records
        rerun.write(topic, second)
    with pytest.raises(ProducerFenced, match="newer writer"):
        earlier.write(topic, first)
        earlier.commit()

    values = sorted(_read_all(servers, topic).column("value").to_pylist())
    assert values == [b"second-1", b"second-2"]


_KILLED_ATTEMPT = """
import sys, time
import pandas as pd
from locality.spark.kafka import TransactionalWriter
servers, topic, tid = sys.argv[1:4]
tx = TransactionalWriter(servers, tid).begin()
tx.write(topic, pd.DataFrame({"key": [f"k{i}" for i in range(50)], "value": ["killed"] * 50}))
tx.flush()
print("written", flush=True)
time.sleep(120)
"""


def test_an_attempt_killed_mid_transaction_leaves_nothing_visible(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    servers, topic = kafka_broker.bootstrap_servers, kafka_topic(1)
    transactional_id = f"{topic}-task-0-batch-1"
    attempt = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_KILLED_ATTEMPT), servers, topic, transactional_id],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert attempt.stdout is not None and attempt.stdout.readline().strip() == "written"
    finally:
        os.kill(attempt.pid, signal.SIGKILL)
        attempt.wait()
    part = KafkaPartition(topic, 0)
    assert end_offsets(servers, [topic], committed_only=False)[part] == 50
    assert end_offsets(servers, [topic])[part] == 0  # the open transaction holds readers back

    rows = pd.DataFrame({"key": [f"k{i}" for i in range(50)], "value": ["rerun"] * 50})
    with TransactionalWriter(servers, transactional_id) as rerun:
        rerun.write(topic, rows)
    ends = end_offsets(servers, [topic])
    assert ends == end_offsets(servers, [topic], committed_only=False)  # nothing open any more
    assert Counter(_read_all(servers, topic).column("value").to_pylist()) == {b"rerun": 50}
