"""A ``StatefulProcessor`` two ways: Spark's own ``transformWithStateInPandas`` with the RocksDB
state store against affinity's ``stateful_processor_foreach_batch``, the same processor over the
same input, through an executor loss and an application restart.

The streaming race (``coordinator/demo/streaming_race.py`` with ``processor=True``): the file
source, 8 tasks (8 Spark state partitions) on the 3-worker cluster, clicks keyed by user; the
processor (``coordinator.demo.race_processor.ClickBuckets``) keeps per user a ``MapState`` of
clicks and value total per value bucket (64), its running totals and 1,000 characters of
padding. A fill batch (every user once), then batches of ``rows`` clicks. Phases: steady state,
an executor killed (``kill -9``, its worker starts a new one), the application restarted. Per
size and way: the steady batches' median seconds and records/s, the state bytes loaded from
checkpoints after each failure and the first batch's seconds after it, the warm share; both
outputs checked against a single-process reference.

Usage: ``python benchmarks/spark_processor.py [--quick] [--doc PATH] [--no-write] [--json]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))

from typing import Any  # noqa: E402

from benchmarks._race_phases import main as race_main  # noqa: E402
from benchmarks._race_phases import race_markdown, race_phases  # noqa: E402
from benchmarks._report import machine  # noqa: E402
from coordinator.demo.race_processor import BUCKETS  # noqa: E402

TASKS = 8  # the file race: a power of two (the elasticity factor of its one input)
USERS = 10_000
PAD = 1_000  # state characters per user: 10 MB of state per way, plus the buckets


def race_size(rows: int, steady: int, per_phase: int) -> dict[str, Any]:
    """One race of the processor at ``rows`` records a batch; its figures per phase and way."""
    return race_phases(rows, steady, per_phase, tasks=TASKS, users=USERS, pad=PAD, processor=True)


def markdown(results: list[dict[str, Any]], load: str) -> str:
    intro = (
        f"`benchmarks/spark_processor.py` on {machine()}; load average at the end: {load}. The "
        f"file source, {TASKS} tasks / state partitions, {USERS:,} users; the processor keeps "
        f"per user a MapState of {BUCKETS} value buckets, its totals and {PAD:,} characters of "
        "padding; a fill batch, then per phase its batches; 3 workers of one core, executors of "
        "1 GB. affinity: `stateful_processor_foreach_batch`; spark: "
        "`transformWithStateInPandas` with the RocksDB state store (changelog checkpointing)."
    )
    return race_markdown(
        "A StatefulProcessor: affinity vs Spark's transformWithStateInPandas (RocksDB)",
        intro,
        results,
    )


def main(argv: list[str] | None = None) -> int:
    return race_main(argv, (__doc__ or "").splitlines()[0], "spark_processor", race_size, markdown)


if __name__ == "__main__":
    raise SystemExit(main())
