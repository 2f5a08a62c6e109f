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
from typing import Any  # noqa: E402

import structlog  # noqa: E402

from benchmarks._race_phases import HEADERS, race_phases, steady_ratio, table_rows  # noqa: E402
from benchmarks._report import DOC, machine, table, write_section  # noqa: E402

PARTITIONS = 12
USERS = 10_000
PAD = 1_000  # state characters per user: 10 MB of state per way
FULL = (1_000_000, 4_000_000)
QUICK = (20_000,)


def race_size(rows: int, steady: int, per_phase: int) -> dict[str, Any]:
    """One race at ``rows`` records a batch over the broker; its figures per phase and way."""
    return race_phases(rows, steady, per_phase, tasks=PARTITIONS, users=USERS, pad=PAD, kafka=True)


def markdown(results: list[dict[str, Any]], load: str) -> str:
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
        table(HEADERS, table_rows(results)),
        "",
    ]
    for result in results:
        lines.append(
            f"- {result['rows']:,} records a batch: affinity / spark records/s "
            f"{steady_ratio(result)}; outputs "
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
