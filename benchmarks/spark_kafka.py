"""Kafka end to end: records/s of a Kafka query whose tasks own their partitions against Spark's
own ``applyInPandasWithState`` over Spark's Kafka connector, on the same topic, through an
executor loss and an application restart.

The streaming race over a real broker (``coordinator/demo/streaming_race.py`` with
``kafka=True``): a topic of 12 partitions (12 affinity tasks = 12 Spark state partitions) on the
3-worker cluster, clicks keyed by user (JSON values), a fill batch (every user once) then batches
of ``rows`` records; each way reads the same records. Phases: steady state, an executor killed
(``kill -9``, its worker starts a new one), the application restarted. Per size and way: the
steady batches' median seconds and records/s, the state bytes loaded from checkpoints after
each failure and the first batch's seconds after it, the warm share; both outputs checked
against a single-process reference.

Usage: ``python benchmarks/spark_kafka.py [--quick] [--doc PATH] [--no-write] [--json]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import structlog  # noqa: E402

from benchmarks._report import DOC, machine, table, write_section  # noqa: E402
from coordinator.demo.race_ways import WAYS, RaceBatch, RaceInput  # noqa: E402
from coordinator.demo.streaming_race import StreamingRace  # noqa: E402

PARTITIONS = 12
USERS = 10_000
PAD = 1_000  # state characters per user: 10 MB of state per way
FULL = (1_000_000, 4_000_000)
QUICK = (20_000,)
PHASES = ("steady state", "executor killed", "application restarted")


def note(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def race_size(rows: int, steady: int, per_phase: int) -> dict[str, Any]:
    """One race at ``rows`` records a batch; its figures per phase and way."""
    with tempfile.TemporaryDirectory(prefix="spark-kafka-") as tmp:
        workdir = Path(tmp)
        source = RaceInput(workdir / "input", users=USERS, rows=rows, pad=PAD)
        race = StreamingRace(
            workdir, source, tasks=PARTITIONS, note=note, executor_memory="1g", kafka=True
        )
        try:
            race.start()
            race.step("fill")
            for _ in range(steady):
                race.step(PHASES[0])
            race.kill_executor()
            for _ in range(per_phase):
                race.step(PHASES[1])
            race.restart_application()
            for _ in range(per_phase):
                race.step(PHASES[2])
            correct = race.outputs_equal()
            batches = race.log.batches
        finally:
            race.stop()
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


HEADERS = ["records/batch", "phase", "way", "median s", "records/s", "first batch", "loaded"]
HEADERS += ["warm"]


def markdown(results: list[dict[str, Any]], load: str) -> str:
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
    lines = [
        "## Kafka: tasks that own their partitions vs Spark's connector and state store",
        "",
        f"`benchmarks/spark_kafka.py` on {machine()}; load average at the end: {load}. A topic of "
        f"{PARTITIONS} partitions on a real broker (Kafka 4.4.0, KRaft), {USERS:,} users x {PAD:,} "
        "characters of state; a fill batch, then per phase its batches; 3 workers of one core, "
        "executors of 1 GB. affinity: a Kafka query whose tasks read their partitions on their "
        "executors (output to a topic too); spark: `applyInPandasWithState` over Spark's Kafka "
        "connector 4.2.0 with the RocksDB state store.",
        "",
        table(HEADERS, rows),
        "",
    ]
    for result in results:
        steady = result["phases"][PHASES[0]]
        ours, theirs = steady["affinity"]["records_per_s"], steady["spark"]["records_per_s"]
        ratio = f"{ours / theirs:.2f}" if ours and theirs else "-"
        lines.append(
            f"- {result['rows']:,} records a batch: affinity / spark records/s {ratio}; outputs "
            f"equal the reference: {'yes' if result['outputs_equal_reference'] else 'NO'}."
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="one small size (a smoke test)")
    parser.add_argument("--doc", type=Path, default=DOC, help="Markdown file to write")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON last")
    args = parser.parse_args(argv)
    for name in ("kazoo", "py4j", "affinity", "metadata", "locality"):
        logging.getLogger(name).setLevel(logging.ERROR)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    sizes, steady, per_phase = (QUICK, 1, 1) if args.quick else (FULL, 2, 2)
    results = [race_size(rows, steady, per_phase) for rows in sizes]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    text = markdown(results, load)
    print(text)
    if not args.no_write:
        write_section("spark_kafka", text, doc=args.doc)
    if args.json:
        print(json.dumps(results))
    return 0 if all(r["outputs_equal_reference"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
