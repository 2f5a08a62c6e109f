"""``spark_streaming.py --throughput``: every run of :mod:`benchmarks._streaming_throughput`
(each way at each batch size with three executors, then affinity and Spark at the largest size
with one and two executors), its table and the goals of the data-path issue: throughput at
least Spark's own operator's at 1M and 4M rows a batch, the driver's peak RSS flat in the batch
size (the largest within 1.2x of the smallest), throughput growing with executors."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks import _streaming_throughput
from benchmarks._child_runs import input_cluster, mib, run_in_child
from benchmarks._report import machine, table
from benchmarks._streaming_throughput import KEYS, TASKS, WAYS, Run, RunFigures

FULL_SIZES = (100_000, 1_000_000, 4_000_000)
QUICK_SIZES = (20_000, 100_000)


def measure(
    sizes: Sequence[int], steady: int, note: Callable[[str], None], timeout_s: float = 3600
) -> list[RunFigures]:
    """Start ZooKeeper and the cluster, write the input, run every run in its own process."""
    results: list[RunFigures] = []
    with input_cluster("throughput-", sizes, steady + 1) as cluster:
        plan = [(way, rows, 3) for rows in sizes for way in WAYS]
        plan += [(way, sizes[-1], n) for n in (1, 2) for way in ("spark", "affinity")]
        for i, (way, rows, executors) in enumerate(plan):
            note(f"run {i + 1}/{len(plan)}: {way}, {rows:,} rows a batch, {executors} executors")
            run = Run(
                way, rows, executors, steady, cluster.master, cluster.zookeeper,
                cluster.pool(rows), cluster.run_dir(i),
            )  # fmt: skip
            child = run_in_child(_streaming_throughput.__file__, [], run.__dict__, timeout_s)
            if child is None:
                note("  failed or timed out")
                continue
            figures = RunFigures(**child)
            note(f"  {figures.median_s:.2f} s a batch, {figures.rows_per_s:,.0f} rows/s")
            results.append(figures)
    return results


def _find(results: Sequence[RunFigures], way: str, rows: int, executors: int) -> RunFigures | None:
    for r in results:
        if (r.way, r.rows, r.executors) == (way, rows, executors):
            return r
    return None


def goals(results: Sequence[RunFigures], sizes: Sequence[int]) -> dict[str, Any]:
    """The issue's goals, each as figures and met / not met."""
    out: dict[str, Any] = {}
    for rows in sizes[1:]:
        ours, theirs = _find(results, "affinity", rows, 3), _find(results, "spark", rows, 3)
        if ours and theirs:
            out[f"throughput ratio at {rows:,}"] = round(ours.rows_per_s / theirs.rows_per_s, 2)
    small, large = _find(results, "affinity", sizes[0], 3), _find(results, "affinity", sizes[-1], 3)
    if small and large:
        for kind in ("driver python", "driver jvm"):
            out[f"{kind} peak, largest / smallest"] = round(
                large.peaks[kind] / small.peaks[kind], 2
            )
    for way in ("affinity", "spark"):
        scaling = [_find(results, way, sizes[-1], n) for n in (1, 2, 3)]
        if all(scaling):
            rates = [round(r.rows_per_s) for r in scaling if r]
            out[f"{way} rows/s with 1, 2, 3 executors"] = rates
    outputs = {}
    for rows in sizes:
        runs = [_find(results, w, rows, 3) for w in WAYS]
        outputs[rows] = len({str(r.outputs) for r in runs if r}) == 1
    out["outputs equal between the ways"] = all(outputs.values())
    return out


HEADERS = ["rows/batch", "executors", "way", "s/batch", "rows/s", "vs spark", "driver python"]
HEADERS += ["driver JVM", "executor JVMs", "executor Pythons"]


def markdown(results: Sequence[RunFigures], sizes: Sequence[int], steady: int) -> str:
    rows = []
    for r in results:
        spark = _find(results, "spark", r.rows, r.executors)
        ratio = f"{r.rows_per_s / spark.rows_per_s:.2f}" if spark else "-"
        p = r.peaks
        rows.append(
            [f"{r.rows:,}", r.executors, r.way, f"{r.median_s:.2f} s", f"{r.rows_per_s:,.0f}",
             ratio, mib(p["driver python"]), mib(p["driver jvm"]), mib(p["executor jvm"]),
             mib(p["executor python"])]
        )  # fmt: skip
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        "## Stateful streaming throughput: rows off the driver",
        "",
        f"`benchmarks/spark_streaming.py --throughput` on {machine()}; load average at the end: "
        f"{load}. One `applyInPandasWithState` function (count and total per key), {KEYS:,} keys, "
        f"{TASKS} tasks = Spark state partitions, a fill batch then {steady} steady batches per "
        "run; each run a fresh application (and driver process); 3 workers of one core, "
        "executors of 1 GB. s/batch: median trigger time of the steady batches; peaks: RSS "
        "during the steady batches, summed per kind of process.",
        "",
        table(HEADERS, rows),
        "",
    ]
    lines += [f"- {name}: {value}" for name, value in goals(results, sizes).items()]
    cores = os.cpu_count() or 1
    if cores < 3:
        lines.append(
            f"- this machine has {cores} cores for the driver and every executor: executors past "
            f"{cores} only share them, so rows/s with executors is bounded by the cores here, "
            "for both ways; the scaling figures need a machine with a core per executor."
        )
    return "\n".join(lines)
