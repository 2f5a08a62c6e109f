"""The pinned shuffle on the 3-worker cluster (locality.spark.pinned_shuffle and the JVM classes
of locality.spark.jvm): the key hash computed on the executors is exactly Python's
``stable_hash`` of the key's JSON text (Python's float ``repr`` included), partition i of a
``repartitionById`` shuffle holds task i's rows and runs on the executor the placement names (a
skewed placement too), and a session without the jar is refused with the fix named."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spark_app import SparkApp

from groupers.keys import stable_hash
from locality.spark import SparkExecutors
from locality.spark.jvm import register_key_hash
from locality.spark.pinned_shuffle import pinned_shuffle, repartition_by_id, spark_hash_int
from locality.spark.state.keyspace import key_text

pytestmark = pytest.mark.spark

FLOATS = st.one_of(
    st.floats(allow_nan=False, allow_infinity=True),
    st.sampled_from([0.1, 1e16, 1e15, 1e-4, 1e-5, 2.0**-1074, 2.0**60, -0.0, 5e-324, 1.5e300]),
    st.integers(-1074, 1023).map(lambda e: 2.0**e),  # powers of two: the uneven rounding gaps
)


@settings(max_examples=400, deadline=None)
@given(FLOATS)
def test_the_jvm_writes_a_float_as_python_does(spark_app: SparkApp, value: float) -> None:
    jvm: Any = spark_app.sc._jvm
    if math.isinf(value):
        return  # written as JSON's Infinity, not repr (checked below through the hash)
    assert jvm.affinity.spark.KeyHash.pythonRepr(value) == repr(value)


STRINGS = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12
) | st.sampled_from(["", '"', "\\", "\x7f", "\x00\x1f", "é", "😀", "a/b", "\t\n\r\b\f"])


@settings(max_examples=3, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), STRINGS),
            st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
            st.one_of(st.none(), FLOATS, st.just(math.nan)),
            st.one_of(st.none(), st.booleans()),
        ),
        min_size=200,
        max_size=400,
    )
)
def test_the_key_hash_on_the_executors_is_stable_hash_of_the_key_text(
    spark_app: SparkApp, rows: list[tuple[Any, ...]]
) -> None:
    spark: Any = spark_app.session
    df = spark.createDataFrame(rows, "s string, n long, f double, b boolean")
    function = register_key_hash(spark)
    got = df.selectExpr("s", "n", "f", "b", f"{function}(struct(s, n, f, b)) AS h").collect()
    assert len(got) == len(rows)
    for row in got:
        key = [row.s, row.n, None if row.f is not None and math.isnan(row.f) else row.f, row.b]
        assert row.h == stable_hash(key_text(key)), (key, key_text(key))


def test_each_partition_holds_its_task_and_runs_where_placed(app: SparkApp) -> None:
    spark: Any = app.session
    executors = SparkExecutors(app.sc).list()
    tasks = [f"t{i}" for i in range(9)]
    # skewed: six tasks on the first executor, three on the second, none on the third
    placement = {t: executors[0 if i < 6 else 1].executor_id for i, t in enumerate(tasks)}
    df = spark.range(0, 9000, numPartitions=5).selectExpr("id", "cast(id % 9 as int) AS task")
    shuffle = pinned_shuffle(df, "task", tasks, placement, executors)
    assert shuffle.unplaceable == ()

    def where(index: int, rows: Any) -> Any:
        from locality.spark import current_executor_id

        seen = {row.task for row in rows}
        yield index, sorted(seen), current_executor_id()

    app.sc._jsc.sc().conf().set("spark.locality.wait.process", "60s")
    try:
        ran = shuffle.frame.rdd.mapPartitionsWithIndex(where).collect()
    finally:
        app.sc._jsc.sc().conf().remove("spark.locality.wait.process")
    assert len(ran) == 9
    for index, seen, executor in ran:
        assert seen == [index]  # partition i holds exactly task i's rows
        assert executor == placement[tasks[index]], (index, executor)


def test_a_session_without_the_jar_is_refused_before_any_state_is_touched(tmp_path: Any) -> None:
    """A session started without affinity's jar: the first batch is refused with the fix named,
    before the handler writes a record or reaches ZooKeeper (nothing listens on its port)."""
    durable = tmp_path / "durable"
    script = f"""
from pyspark.sql import SparkSession
from coordinator.config import load_config
from coordinator.streaming import StreamingUsageError, stateful_foreach_batch
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
config = load_config(data={{
    "job": {{"name": "nojar", "id": "1", "run_id": "r1"}},
    "zookeeper": {{"connect": "127.0.0.1:1", "session_timeout_ms": 4000}},
    "inputs": [{{"system": "spark", "stream": "s", "partitions": 1}}],
    "state": {{"checkpoint_dir": {str(durable)!r}, "local_dir": {str(tmp_path / "local")!r}}},
}}, environ={{}})
handler = stateful_foreach_batch(
    lambda key, pdfs, state: iter(()), key_columns=["k"], output_schema="k string",
    state_schema="n long", sink=lambda df, b: None, config=config)
try:
    handler(spark.createDataFrame([("a",)], "k string"), 0)
except StreamingUsageError as exc:
    print("REFUSED", exc)
spark.stop()
"""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    refused = [line for line in done.stdout.splitlines() if line.startswith("REFUSED")]
    assert refused, done.stdout + done.stderr[-3000:]
    assert "affinity.spark.PinnedRDD" in refused[0] and "spark.jars=" in refused[0]
    assert not durable.exists()  # no pending record, no checkpoint: nothing was touched


def test_a_pyspark_without_repartition_by_id_gets_the_same_partitions(spark_app: SparkApp) -> None:
    """Before pyspark 4.1 (no ``repartitionById``) the hash partitioning on partition keys puts
    row r in partition ``r.task``, as ``repartitionById`` does; Spark's ``hash()`` is
    :func:`spark_hash_int`."""
    spark: Any = spark_app.session
    n = 13
    df = spark.range(0, 1300, numPartitions=3).selectExpr("cast(id % 13 as int) AS task")

    class Old:  # the DataFrame of a pyspark before 4.1: no repartitionById
        def __init__(self, frame: Any) -> None:
            self.repartition = frame.repartition

    def tasks_by_partition(frame: Any) -> list[list[int]]:
        seen = frame.rdd.mapPartitionsWithIndex(lambda i, rows: [(i, {r.task for r in rows})])
        return [sorted(s) for _, s in sorted(seen.collect())]

    assert tasks_by_partition(repartition_by_id(Old(df), n, "task")) == [[i] for i in range(n)]
    assert tasks_by_partition(repartition_by_id(df, n, "task")) == [[i] for i in range(n)]
    values = [0, 1, -1, 42, 2**31 - 1, -(2**31), 123456789]
    hashed = spark.createDataFrame([(v,) for v in values], "v int").selectExpr("hash(v) AS h")
    assert [r.h for r in hashed.collect()] == [spark_hash_int(v) for v in values]
