"""Throughput of one ``applyInPandasWithState`` function, Spark's own operator against
``stateful_foreach_batch``, at large micro-batches (``spark_streaming.py --throughput``).

Each run is one fresh application on the standalone cluster (a master and a worker on each of
127.0.0.2-4, one core each, executors of 1 GB; ``spark.cores.max`` = the executors wanted), one
way, one batch size: a fill batch, then steady batches, from a file source of one Parquet file
per batch (``rows`` rows over ``keys`` keys, the same files for every way). The function keeps a
count and a total per key and outputs them; the sink writes the output to the ``noop`` format
and keeps its row count and sums (to compare the ways). Ways:

- **spark**: ``groupBy("user").applyInPandasWithState`` (RocksDB state store, changelog
  checkpointing);
- **affinity**: ``stateful_foreach_batch`` (one pinned shuffle, rows never on the driver);
- **driver path**: ``stateful_foreach_batch(data_path="driver")``, the former path (rows
  collected to the driver and back), the before figure.

Per run: the steady batches' median trigger time (``durationMs.triggerExecution``), rows/s, and
the peak RSS during the steady batches of the driver's Python, the driver's JVM, the executors'
JVMs and the executors' Python workers (summed over processes, sampled every 0.1 s).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KEYS = 10_000
TASKS = 8
WAYS = ("spark", "affinity", "driver path")
OUTPUT = "user string, n long, total long"
STATE = "n long, total long"


def count_values(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
    """Rows and value total per key so far (the function both ways run)."""
    import pandas as pd

    n, total = state.get if state.exists else (0, 0)
    for pdf in pdfs:
        n += len(pdf)
        total += int(pdf["value"].sum())
    state.update((n, total))
    yield pd.DataFrame({"user": [key[0]], "n": [n], "total": [total]})


def write_input(spark: Any, folder: Path, rows: int, batches: int) -> None:
    """``batches`` Parquet files of ``rows`` rows each (user ``u00000``.. over :data:`KEYS`
    keys), one per batch, written in batch order (the file source reads them by age)."""
    folder.mkdir(parents=True, exist_ok=True)
    for b in range(batches):
        staging = folder.parent / f".{folder.name}-{b}"
        (
            spark.range(b * rows, (b + 1) * rows, numPartitions=3)
            .selectExpr(
                f"format_string('u%05d', cast(pmod(id * 7919, {KEYS}) as int)) AS user",
                "pmod(id, 97) AS value",
                "id AS seq",
            )
            .coalesce(1)
            .write.parquet(str(staging))
        )
        part = next(staging.glob("part-*.parquet"))
        os.replace(part, folder / f"batch-{b:05d}.parquet")
        time.sleep(1.1)  # distinct modification times: the source orders files by age


@dataclass
class RunFigures:
    way: str
    rows: int
    executors: int
    seconds: list[float]  # steady batches' trigger times
    peaks: dict[str, int]
    outputs: list[list[int]]  # per batch: output rows, sum n, sum total

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds)

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.median_s


class Sink:
    """Writes the output to ``noop`` and keeps [rows, sum n, sum total] per batch."""

    def __init__(self) -> None:
        self.outputs: dict[int, list[int]] = {}

    def __call__(self, df: Any, batch_id: int) -> None:
        df.write.format("noop").mode("overwrite").save()
        row = df.selectExpr("count(*)", "coalesce(sum(n), 0)", "coalesce(sum(total), 0)").first()
        self.outputs[int(batch_id)] = [int(row[0]), int(row[1]), int(row[2])]


@dataclass(frozen=True)
class Run:
    """One measured run: a way, a batch size, a number of executors (and where things are)."""

    way: str
    rows: int
    executors: int
    steady: int
    master: str
    zookeeper: str
    pool: str  # the batch files of this size
    workdir: str


def run_one(run: Run) -> RunFigures:
    """Measure ``run`` in this process (a fresh application; see the module docstring)."""
    from affinity_pipeline.cluster import spark_session

    from coordinator.demo.race_ways import race_config, spark_state_conf
    from locality.spark import SparkExecutors

    work = Path(run.workdir)
    source = work / "input"
    source.mkdir(parents=True)
    files = sorted(Path(run.pool).glob("batch-*.parquet"))[: run.steady + 1]
    conf = {**spark_state_conf(TASKS), "spark.cores.max": str(run.executors)}
    spark = spark_session(
        run.master, app_name=f"throughput-{run.way}", executor_memory="1g",
        driver_memory="1g", conf=conf,
    )  # fmt: skip
    spark.sparkContext.setLogLevel("ERROR")
    SparkExecutors(spark.sparkContext).wait_for(run.executors, timeout_s=120)
    config = race_config(run.zookeeper, work, TASKS, name=f"tp-{os.getpid()}")
    handlers: list[Any] = []

    def make_handler(sink: Sink, data_path: str) -> Any:
        from coordinator.streaming import stateful_foreach_batch

        handler = stateful_foreach_batch(
            count_values, key_columns=["user"], output_schema=OUTPUT, state_schema=STATE,
            sink=sink, config=config, data_path=data_path,
        )  # fmt: skip
        handlers.append(handler)
        return handler

    os.link(files[0], source / files[0].name)  # the fill batch
    query, sink = start_query(run.way, spark, source, work / "checkpoint", make_handler)
    query.processAllAvailable()
    from benchmarks._rss import KINDS, AppPeaks  # run as a script: its path is set in __main__

    sc = spark.sparkContext
    peaks = AppPeaks(sc.applicationId, sc._gateway.proc.pid).start()
    for path in files[1:]:
        os.link(path, source / path.name)
    query.processAllAvailable()
    measured = {kind: peak for kind, peak in peaks.stop().items() if kind in KINDS}
    seconds = trigger_seconds(query)
    query.stop()
    for handler in handlers:
        handler.close()
    spark.stop()
    steady = [seconds[b] for b in sorted(seconds) if b >= 1]
    outputs = [sink.outputs[b] for b in sorted(sink.outputs)]
    return RunFigures(run.way, run.rows, run.executors, steady, measured, outputs)


def start_query(
    way: str, spark: Any, source: Path, checkpoint: Path, make_handler: Callable[..., Any]
) -> tuple[Any, Sink]:
    """The way's streaming query over ``source`` (one file per trigger)."""
    sink = Sink()
    reader = spark.readStream.schema("user string, value long, seq long")
    stream = reader.option("maxFilesPerTrigger", 1).parquet(str(source))
    if way == "spark":
        writer = (
            stream.groupBy("user")
            .applyInPandasWithState(count_values, OUTPUT, STATE, "update", "NoTimeout")
            .writeStream.outputMode("update")
            .foreachBatch(sink)
        )
    else:
        handler = make_handler(sink, "driver" if way == "driver path" else "pinned-shuffle")
        writer = stream.writeStream.foreachBatch(handler)
    return writer.option("checkpointLocation", str(checkpoint)).start(), sink


def trigger_seconds(query: Any) -> dict[int, float]:
    return {
        int(p["batchId"]): p["durationMs"].get("triggerExecution", 0) / 1000
        for p in query.recentProgress
        if p.get("numInputRows", 0) > 0
    }


if __name__ == "__main__":
    import json
    import logging
    import sys

    _root = Path(__file__).resolve().parent.parent
    sys.path[:0] = [str(_root), str(_root / "examples" / "pipeline")]
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    figures = run_one(Run(**json.loads(sys.argv[1])))
    print(json.dumps(figures.__dict__))
