"""Kafka end to end: records/s of ``stateful_kafka_query`` (tasks that own their partitions) and
of ``stateful_foreach_batch`` over Spark's own Kafka source with its partitions pinned (the same
path, the one a JSON ``decode`` in Python, the other Spark's ``from_json``), against
Spark's own ``applyInPandasWithState`` over Spark's Kafka connector, on the same records, through
an executor loss and an application restart.

The streaming race over a real broker (``coordinator/demo/streaming_race.py`` with
``kafka=True``): a topic of 12 partitions (12 affinity tasks = 12 Spark state partitions) on the
3-worker cluster, clicks keyed by user (JSON values), a fill batch (every user once) then batches
of ``rows`` records; each way reads the same records. Phases: steady state, an executor killed
(``kill -9``, its worker starts a new one), the application restarted. Per size and way: the
steady batches' median seconds and records/s, the state bytes loaded from checkpoints after
each failure and the first batch's seconds after it, the warm share; both outputs checked
against a single-process reference.

``--memory``: each way alone in a fresh application (:mod:`benchmarks._race_memory`), a fill
batch then steady batches, with the peak RSS of the driver's Python and JVM, the executor JVMs
and their Python workers (section ``spark_kafka_memory``).

Usage: ``python benchmarks/spark_kafka.py [--quick] [--memory] [--doc PATH] [--no-write]
[--json]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
from typing import Any  # noqa: E402

from benchmarks._race_memory import measure_memory, memory_markdown, way_memory  # noqa: E402
from benchmarks._race_phases import FULL, QUICK, note, quiet, race_markdown, race_phases  # noqa: E402
from benchmarks._race_phases import main as race_main  # noqa: E402
from benchmarks._report import DOC, machine, write_section  # noqa: E402

PARTITIONS = 12
USERS = 10_000
PAD = 1_000  # state characters per user: 10 MB of state per way
WAYS = ("affinity", "affinity-source", "spark")
RACE = {"tasks": PARTITIONS, "users": USERS, "pad": PAD, "kafka": True, "pinned_source": True}


def race_size(rows: int, steady: int, per_phase: int) -> dict[str, Any]:
    """One race at ``rows`` records a batch over the broker; its figures per phase and way."""
    return race_phases(rows, steady, per_phase, **RACE)


def markdown(results: list[dict[str, Any]], load: str) -> str:
    intro = (
        f"`benchmarks/spark_kafka.py` on {machine()}; load average at the end: {load}. A topic of "
        f"{PARTITIONS} partitions on a real broker (Kafka 4.4.0, KRaft), {USERS:,} users x {PAD:,} "
        "characters of state; a fill batch, then per phase its batches; 3 workers of one core, "
        "executors of 1 GB. affinity: `stateful_kafka_query` (the pinned source below in one call, "
        "the JSON decoded by a Python `decode` in a `mapInArrow`; output to a topic too); "
        "affinity-source: the same function through "
        '`stateful_foreach_batch` over `format("affinity-kafka")` (Spark\'s Kafka source, its '
        "partitions pinned: one availableNow run per batch, no shuffle); spark: "
        "`applyInPandasWithState` over Spark's Kafka connector 4.2.0 with the RocksDB state store."
    )
    return race_markdown(
        "Kafka: tasks that own their partitions vs Spark's connector and state store",
        intro,
        results,
    )


def memory(argv: list[str]) -> int:
    """``--memory``: each way alone (module docstring); ``--memory-child RUN``: one of them."""
    parser = argparse.ArgumentParser(description="spark_kafka.py --memory")
    parser.add_argument("--memory", action="store_true")
    parser.add_argument("--memory-child", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="one small size (a smoke test)")
    parser.add_argument("--doc", type=Path, default=DOC, help="Markdown file to write")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    quiet()
    if args.memory_child:
        run = json.loads(args.memory_child)
        print(json.dumps(way_memory(run["way"], run["rows"], run["steady"], **RACE)))
        return 0
    sizes, steady = (QUICK, 1) if args.quick else (FULL, 3)
    results = measure_memory(__file__, WAYS, sizes, steady, note)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    intro = (
        f"`benchmarks/spark_kafka.py --memory` on {machine()}; load average at the end: {load}. "
        "The race's Kafka input and ways (above), each way alone in a fresh application, "
        f"cluster and broker: a fill batch, then {steady} steady batches; the peak RSS during "
        "the steady batches of the application's processes (each kind summed over its "
        "processes; other applications on the machine left out). The driver's Python is the "
        "race's own process, which also makes each batch's records and keeps the reference "
        "(the same for every way)."
    )
    text = memory_markdown("Kafka: memory of each way, alone", intro, results)
    print(text)
    if not args.no_write:
        write_section("spark_kafka_memory", text, doc=args.doc)
    return 0 if results and all(r["outputs_equal_reference"] for r in results) else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--memory" in argv or any(a.startswith("--memory-child") for a in argv):
        return memory(argv)
    return race_main(argv, (__doc__ or "").splitlines()[0], "spark_kafka", race_size, markdown)


if __name__ == "__main__":
    raise SystemExit(main())
