"""The streaming race through its failure phases, for ``benchmarks/spark_kafka.py`` and
``benchmarks/spark_processor.py``: a fill batch, steady batches, an executor killed, the
application restarted; per phase and way the steady median, records/s, the first batch after the
failure, the state bytes loaded from checkpoints and the warm share (one home for these figures
and their table rows)."""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from coordinator.demo.race_ways import WAYS, RaceBatch, RaceInput
from coordinator.demo.streaming_race import StreamingRace

PHASES = ("steady state", "executor killed", "application restarted")
HEADERS = ["records/batch", "phase", "way", "median s", "records/s", "first batch", "loaded"]
HEADERS += ["warm"]


def note(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def race_phases(
    rows: int, steady: int, per_phase: int, *, tasks: int, users: int, pad: int, **race: Any
) -> dict[str, Any]:
    """One race at ``rows`` records a batch (``race``: :class:`StreamingRace` options); its
    figures per phase and way."""
    with tempfile.TemporaryDirectory(prefix="affinity-race-") as tmp:
        workdir = Path(tmp)
        source = RaceInput(workdir / "input", users=users, rows=rows, pad=pad)
        run = StreamingRace(workdir, source, tasks=tasks, note=note, executor_memory="1g", **race)
        try:
            run.start()
            run.step("fill")
            for _ in range(steady):
                run.step(PHASES[0])
            run.kill_executor()
            for _ in range(per_phase):
                run.step(PHASES[1])
            run.restart_application()
            for _ in range(per_phase):
                run.step(PHASES[2])
            correct = run.outputs_equal()
            batches = run.log.batches
        finally:
            run.stop()
    return {
        "rows": rows,
        "outputs_equal_reference": correct,
        "phases": {p: {w: figures(batches[w], p, rows) for w in WAYS} for p in PHASES},
    }


def figures(batches: list[RaceBatch], phase: str, rows: int) -> dict[str, Any]:
    done = [b for b in batches if b.phase == phase]
    seconds = [b.seconds for b in done]
    tasks = sum(b.tasks for b in done)
    median = statistics.median(seconds) if seconds else None
    return {
        "batches": len(done),
        "median_s": round(median, 2) if median else None,
        "records_per_s": round(rows / median) if median else None,
        "first_s": round(seconds[0], 2) if seconds else None,
        "bytes_loaded": sum(b.bytes_loaded for b in done),
        "warm_ratio": round(sum(b.warm for b in done) / tasks, 3) if tasks else None,
    }


def table_rows(results: list[dict[str, Any]]) -> list[list[str]]:
    """One row per size, phase and way, in :data:`HEADERS`' order."""
    rows = []
    for result in results:
        for phase in PHASES:
            for way in WAYS:
                f = result["phases"][phase][way]
                rows.append(
                    [f"{result['rows']:,}", phase, way, f"{f['median_s']} s",
                     f"{f['records_per_s']:,}" if f["records_per_s"] else "-", f"{f['first_s']} s",
                     f"{f['bytes_loaded'] / 2**20:,.1f} MiB",
                     "-" if f["warm_ratio"] is None else f"{f['warm_ratio']:.0%}"]
                )  # fmt: skip
    return rows


def steady_ratio(result: dict[str, Any]) -> str:
    """affinity's steady records/s over Spark's."""
    steady = result["phases"][PHASES[0]]
    ours, theirs = steady["affinity"]["records_per_s"], steady["spark"]["records_per_s"]
    return f"{ours / theirs:.2f}" if ours and theirs else "-"
