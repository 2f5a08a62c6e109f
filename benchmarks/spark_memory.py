"""Executor Python memory of ``stateful_foreach_batch`` by batch size: a task's rows streamed key
by key (sorted by Spark within the partition) against the way before (the whole partition read
into one Arrow table in the Python worker and sorted there: ``spark.affinity.task.streamRows``
above any task's rows; the streamed way sets it to 0).

Each run is one fresh application on the standalone cluster (a master and a worker on each of
127.0.0.2-4, one core each, executors of 1 GB), one way, one batch size: a fill batch, then
steady batches from a file source of one Parquet file per batch (the input and the function of
``spark_streaming.py --throughput``: ``rows`` rows over 10,000 keys, a count and a total per
key; :mod:`benchmarks._streaming_throughput`), 8 tasks. Per run: the steady batches' median
trigger time, and during the steady batches the peak RSS of the executors' Python processes
(sampled every 0.1 s): the largest single process (a Python worker running a task) and the sum
over all of them (the daemons included). Goal (issue 34): the streamed way's peak at the
largest size within 1.5x of the smallest (before, it grows with the batch).

Usage: ``python benchmarks/spark_memory.py [--quick] [--sizes N,N] [--doc PATH] [--no-write]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(_ROOT), str(_ROOT / "examples" / "pipeline")]

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

from benchmarks._child_runs import input_cluster, mib, run_in_child  # noqa: E402
from benchmarks._report import DOC, machine, table, write_section  # noqa: E402
from benchmarks._rss import LARGEST_WORKER, AppPeaks  # noqa: E402
from benchmarks._streaming_throughput import (  # noqa: E402
    KEYS,
    OUTPUT,
    STATE,
    TASKS,
    Sink,
    count_values,
    trigger_seconds,
)

FULL_SIZES = (1_000_000, 10_000_000)
QUICK_SIZES = (20_000, 200_000)
WAYS = ("in memory", "streamed")
EXECUTORS = 3


@dataclass(frozen=True)
class Run:
    way: str
    rows: int
    steady: int
    master: str
    zookeeper: str
    pool: str
    workdir: str


@dataclass
class Figures:
    way: str
    rows: int
    seconds: list[float]
    largest: int  # bytes: the largest executor Python process
    total: int  # bytes: all executor Python processes
    outputs: list[list[int]]

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds)


def run_one(run: Run) -> Figures:
    """Measure ``run`` in this process (a fresh application; see the module docstring)."""
    from affinity_pipeline.cluster import spark_session

    from coordinator.demo.race_ways import race_config
    from coordinator.streaming import stateful_foreach_batch
    from coordinator.streaming.stage import STREAM_ROWS_CONF
    from locality.spark import SparkExecutors

    work = Path(run.workdir)
    source = work / "input"
    source.mkdir(parents=True)
    files = sorted(Path(run.pool).glob("batch-*.parquet"))[: run.steady + 1]
    conf = {
        "spark.cores.max": str(EXECUTORS),
        "spark.sql.shuffle.partitions": str(TASKS),
        STREAM_ROWS_CONF: str(2**62 if run.way == "in memory" else 0),
    }
    spark = spark_session(
        run.master, app_name=f"memory-{run.way}", executor_memory="1g", driver_memory="1g",
        conf=conf,
    )  # fmt: skip
    spark.sparkContext.setLogLevel("ERROR")
    SparkExecutors(spark.sparkContext).wait_for(EXECUTORS, timeout_s=120)
    config = race_config(run.zookeeper, work, TASKS, name=f"mem-{os.getpid()}")
    sink = Sink()
    handler = stateful_foreach_batch(
        count_values, key_columns=["user"], output_schema=OUTPUT, state_schema=STATE,
        sink=sink, config=config,
    )  # fmt: skip
    os.link(files[0], source / files[0].name)  # the fill batch
    reader = spark.readStream.schema("user string, value long, seq long")
    stream = reader.option("maxFilesPerTrigger", 1).parquet(str(source))
    query = (
        stream.writeStream.foreachBatch(handler)
        .option("checkpointLocation", str(work / "checkpoint"))
        .start()
    )
    query.processAllAvailable()
    sc = spark.sparkContext
    peaks = AppPeaks(sc.applicationId, sc._gateway.proc.pid).start()
    for path in files[1:]:
        os.link(path, source / path.name)
    query.processAllAvailable()
    measured = peaks.stop()
    largest, total = measured[LARGEST_WORKER], measured["executor python"]
    seconds = trigger_seconds(query)
    query.stop()
    handler.close()
    spark.stop()
    steady = [seconds[b] for b in sorted(seconds) if b >= 1]
    outputs = [sink.outputs[b] for b in sorted(sink.outputs)]
    return Figures(run.way, run.rows, steady, largest, total, outputs)


def measure(sizes: tuple[int, ...], steady: int, timeout_s: float = 1800) -> list[Figures]:
    """Start ZooKeeper and the cluster, write the input, run each way at each size."""
    results: list[Figures] = []
    with input_cluster("spark-memory-", sizes, steady + 1) as cluster:
        plan = [(way, rows) for rows in sizes for way in WAYS]
        for i, (way, rows) in enumerate(plan):
            note(f"run {i + 1}/{len(plan)}: {way}, {rows:,} rows a batch")
            run = Run(
                way, rows, steady, cluster.master, cluster.zookeeper, cluster.pool(rows),
                cluster.run_dir(i),
            )  # fmt: skip
            child = run_in_child(__file__, ["--child"], run.__dict__, timeout_s)
            if child is None:
                note("  failed or timed out")
                continue
            figures = Figures(**child)
            note(f"  {figures.median_s:.2f} s a batch, largest worker {mib(figures.largest)}")
            results.append(figures)
    return results


def note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _find(results: list[Figures], way: str, rows: int) -> Figures | None:
    return next((r for r in results if r.way == way and r.rows == rows), None)


def goals(results: list[Figures], sizes: tuple[int, ...]) -> dict[str, Any]:
    """Per way, the largest size's peaks over the smallest's; the outputs equal between ways."""
    found: dict[str, Any] = {}
    for way in WAYS:
        small, large = _find(results, way, sizes[0]), _find(results, way, sizes[-1])
        if small is None or large is None:
            continue
        found[f"{way}: largest worker, {sizes[-1]:,} / {sizes[0]:,}"] = round(
            large.largest / small.largest, 2
        )
        found[f"{way}: all executor Pythons, {sizes[-1]:,} / {sizes[0]:,}"] = round(
            large.total / small.total, 2
        )
    streamed = found.get(f"streamed: largest worker, {sizes[-1]:,} / {sizes[0]:,}")
    found["goal met (streamed, largest worker within 1.5x)"] = (
        streamed is not None and streamed <= 1.5
    )
    pairs = [(_find(results, WAYS[0], n), _find(results, WAYS[1], n)) for n in sizes]
    found["outputs equal between the ways"] = all(
        a is not None and b is not None and a.outputs == b.outputs for a, b in pairs
    )
    return found


def markdown(results: list[Figures], sizes: tuple[int, ...], steady: int) -> str:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    rows = []
    for r in results:
        base = _find(results, r.way, sizes[0])
        ratio = f"{r.largest / base.largest:.2f}" if base is not None else "-"
        rows.append(
            [f"{r.rows:,}", r.way, f"{r.median_s:.2f} s", f"{r.rows / r.median_s:,.0f}",
             mib(r.largest), ratio, mib(r.total)]
        )  # fmt: skip
    headers = [
        "rows/batch", "way", "s/batch", "rows/s", "largest executor Python",
        f"vs {sizes[0]:,}", "all executor Pythons",
    ]  # fmt: skip
    lines = [
        "## Executor Python memory by batch size: rows streamed key by key vs one table",
        "",
        f"`benchmarks/spark_memory.py` on {machine()}; load average at the end: {load}. "
        f"`stateful_foreach_batch` with one `applyInPandasWithState` function (count and total "
        f"per key), {KEYS:,} keys, {TASKS} tasks, a fill batch then {steady} steady batches per "
        f"run; each run a fresh application; {EXECUTORS} workers of one core, executors of 1 GB. "
        "**streamed**: each task's partition sorted by Spark (`sortWithinPartitions`, which "
        "spills) and cut into key runs across Arrow batches in the Python worker; **in memory**: "
        "the whole partition in one Arrow table sorted in Python "
        "(`spark.affinity.task.streamRows` above any task's rows; streamed: 0). "
        "s/batch: median trigger time of the steady "
        "batches; peaks: RSS during the steady batches, of the largest executor Python process "
        "(a worker running tasks) and summed over all of them (daemons included). The machine "
        "is shared with other jobs: compare the ratios.",
        "",
        table(headers, rows),
        "",
    ]
    lines += [f"- {name}: {value}" for name, value in goals(results, sizes).items()]
    for n in sizes:
        before, after = _find(results, WAYS[0], n), _find(results, WAYS[1], n)
        if before is not None and after is not None:
            lines.append(
                f"- s/batch at {n:,}, streamed / in memory: {after.median_s / before.median_s:.2f}"
            )
    if sizes != FULL_SIZES:
        lines.append(
            f"- sizes {', '.join(f'{n:,}' for n in sizes)} (`--sizes`), not the issue's "
            "1,000,000 and 10,000,000: what this shared machine runs in a few minutes"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    parser.add_argument("--sizes", help="rows a batch, comma separated (default 1M,10M)")
    parser.add_argument("--steady", type=int, default=2, help="steady batches per run")
    parser.add_argument("--doc", type=Path, default=DOC, help="Markdown file to write")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    _quiet()
    if args.child:
        print(json.dumps(run_one(Run(**json.loads(args.child))).__dict__))
        return 0
    sizes = QUICK_SIZES if args.quick else FULL_SIZES
    if args.sizes:
        sizes = tuple(int(s) for s in args.sizes.split(","))
    results = measure(sizes, args.steady)
    text = markdown(results, sizes, args.steady)
    from rich.console import Console
    from rich.markdown import Markdown

    Console(stderr=False).print(Markdown(text))
    if not args.no_write:
        write_section("spark_memory", text, doc=args.doc)
    return 0 if goals(results, sizes)["outputs equal between the ways"] else 1


def _quiet() -> None:
    import structlog

    for name in ("kazoo", "py4j", "affinity", "metadata", "locality"):
        logging.getLogger(name).setLevel(logging.ERROR)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))


if __name__ == "__main__":
    sys.exit(main())
