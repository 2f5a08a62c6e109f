"""The streaming race through its failure phases, for ``benchmarks/spark_kafka.py`` and
``benchmarks/spark_processor.py``: a fill batch, steady batches, an executor killed, the
application restarted; per phase and way the steady median, records/s, the first batch after the
failure, the state bytes loaded from checkpoints and the warm share (one home for these figures
and their table rows)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

from benchmarks._report import DOC, table, write_section
from coordinator.demo.race_ways import RaceBatch, RaceInput
from coordinator.demo.streaming_race import StreamingRace

PHASES = ("steady state", "executor killed", "application restarted")
HEADERS = ["records/batch", "phase", "way", "median s", "records/s", "first batch", "loaded"]
HEADERS += ["warm", "shuffle"]


QUICK = (20_000,)
FULL = (1_000_000, 4_000_000)


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
            ways = run.names
        finally:
            run.stop()
    return {
        "rows": rows,
        "outputs_equal_reference": correct,
        "phases": {p: {w: figures(batches[w], p, rows) for w in ways} for p in PHASES},
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
        "shuffle_bytes": sum(b.shuffle_bytes for b in done),
    }


def table_rows(results: list[dict[str, Any]]) -> list[list[str]]:
    """One row per size, phase and way, in :data:`HEADERS`' order."""
    rows = []
    for result in results:
        for phase in PHASES:
            for way, f in result["phases"][phase].items():
                rows.append(
                    [f"{result['rows']:,}", phase, way, f"{f['median_s']} s",
                     f"{f['records_per_s']:,}" if f["records_per_s"] else "-", f"{f['first_s']} s",
                     f"{f['bytes_loaded'] / 2**20:,.1f} MiB",
                     "-" if f["warm_ratio"] is None else f"{f['warm_ratio']:.0%}",
                     f"{f['shuffle_bytes'] / 2**20:,.1f} MiB"]
                )  # fmt: skip
    return rows


def steady_ratio(result: dict[str, Any], way: str = "affinity") -> str:
    """``way``'s steady records/s over Spark's."""
    steady = result["phases"][PHASES[0]]
    ours, theirs = steady[way]["records_per_s"], steady["spark"]["records_per_s"]
    return f"{ours / theirs:.2f}" if ours and theirs else "-"


def main(
    argv: list[str] | None,
    description: str,
    section: str,
    race: Callable[[int, int, int], dict[str, Any]],
    markdown: Callable[[list[dict[str, Any]], str], str],
) -> int:
    """A race benchmark's command line: ``--quick`` (one small size), ``--doc``, ``--no-write``,
    ``--json``; writes ``markdown(results, load)`` as ``section`` of the doc."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="one small size (a smoke test)")
    parser.add_argument("--doc", type=Path, default=DOC, help="Markdown file to write")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON last")
    args = parser.parse_args(argv)
    quiet()
    sizes, steady, per_phase = (QUICK, 1, 1) if args.quick else (FULL, 2, 2)
    results = [race(rows, steady, per_phase) for rows in sizes]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    text = markdown(results, load)
    print(text)
    if not args.no_write:
        write_section(section, text, doc=args.doc)
    if args.json:
        print(json.dumps(results))
    return 0 if all(r["outputs_equal_reference"] for r in results) else 1


def quiet() -> None:
    """Errors only, from the libraries and affinity's structlog."""
    for name in ("kazoo", "py4j", "affinity", "metadata", "locality"):
        logging.getLogger(name).setLevel(logging.ERROR)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))


def race_markdown(title: str, intro: str, results: list[dict[str, Any]]) -> str:
    """The section: ``title``, ``intro``, the table, then per size affinity's steady records/s
    over Spark's and whether the outputs were right."""
    outcomes = [
        f"- {r['rows']:,} records a batch: "
        + "; ".join(
            f"{way} / spark records/s {steady_ratio(r, way)}"
            for way in r["phases"][PHASES[0]]
            if way != "spark"
        )
        + f"; outputs equal the reference: {'yes' if r['outputs_equal_reference'] else 'NO'}."
        for r in results
    ]
    return "\n".join(
        [f"## {title}", "", intro, "", table(HEADERS, table_rows(results)), "", *outcomes]
    )
