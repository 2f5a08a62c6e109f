"""Each way of the streaming race alone, for its memory: ``spark_kafka.py --memory``.

In one race the ways share an application, so a process's peak cannot be told apart by way (a
JVM's heap and a Python worker keep what an earlier batch of another way grew them to). Here
each way runs alone (``StreamingRace(only=(way,))``), in a fresh Python process
(:func:`benchmarks._child_runs.run_in_child`) with its own cluster, broker and application: a
fill batch, then ``steady`` batches during which :class:`benchmarks._rss.AppPeaks` samples the
application's processes (the driver's Python and JVM, the executor JVMs, their Python workers).
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks._child_runs import mib, run_in_child
from benchmarks._report import table
from benchmarks._rss import KINDS, LARGEST_WORKER, AppPeaks

__all__ = ["memory_markdown", "measure_memory", "way_memory"]

STEADY = "steady state"
HEADERS = ["records/batch", "way", "median s", "driver Python", "driver JVM", "executor JVMs"]
HEADERS += ["executor Pythons", "largest Python worker"]


def way_memory(
    way: str, rows: int, steady: int, *, tasks: int, users: int, pad: int, **race: Any
) -> dict[str, Any]:
    """Run ``way`` alone (module docstring); its steady median seconds, peaks and correctness."""
    from coordinator.demo.race_ways import RaceInput
    from coordinator.demo.streaming_race import StreamingRace

    with tempfile.TemporaryDirectory(prefix="affinity-race-memory-") as tmp:
        workdir = Path(tmp)
        source = RaceInput(workdir / "input", users=users, rows=rows, pad=pad)
        run = StreamingRace(workdir, source, tasks=tasks, executor_memory="1g", only=(way,), **race)
        try:
            run.start()
            run.step("fill")
            sc = run.session.sparkContext
            peaks = AppPeaks(sc.applicationId, sc._gateway.proc.pid).start()
            for _ in range(steady):
                run.step(STEADY)
            measured = peaks.stop()
            correct = run.outputs_equal()
            seconds = [b.seconds for b in run.log.batches[way] if b.phase == STEADY]
        finally:
            run.stop()
    return {
        "way": way,
        "rows": rows,
        "median_s": round(statistics.median(seconds), 2),
        "peaks": measured,
        "outputs_equal_reference": correct,
    }


def measure_memory(
    script: str,
    ways: Sequence[str],
    sizes: Sequence[int],
    steady: int,
    note: Callable[[str], None],
    timeout_s: float = 3600,
) -> list[dict[str, Any]]:
    """Each way at each size in a fresh process (``script --memory-child <run>``)."""
    results = []
    for rows in sizes:
        for way in ways:
            note(f"{way} alone, {rows:,} records a batch ...")
            run = {"way": way, "rows": rows, "steady": steady}
            figures = run_in_child(script, ["--memory-child"], run, timeout_s)
            if figures is None:
                note("  failed or timed out")
                continue
            note(f"  {figures['median_s']} s a batch, driver JVM "
                 f"{mib(figures['peaks']['driver jvm'])}")  # fmt: skip
            results.append(figures)
    return results


def memory_markdown(title: str, intro: str, results: list[dict[str, Any]]) -> str:
    """The section: ``title``, ``intro``, a row per size and way, and whether outputs were right."""
    rows = [
        [f"{r['rows']:,}", r["way"], f"{r['median_s']} s",
         *(mib(r["peaks"][kind]) for kind in KINDS), mib(r["peaks"][LARGEST_WORKER])]
        for r in results
    ]  # fmt: skip
    right = all(r["outputs_equal_reference"] for r in results)
    return "\n".join(
        [
            f"## {title}",
            "",
            intro,
            "",
            table(HEADERS, rows),
            "",
            f"- every way's outputs equal the reference: {right}",
        ]
    )
