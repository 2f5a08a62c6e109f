"""A stateful Structured Streaming query, Spark's state store against affinity's: batch time and
state bytes loaded from checkpoints through an executor loss, a rolling restart of the workers
and an application restart; and the cost of pinning tasks.

One ``applyInPandasWithState`` function (per user: clicks, a value total and an incompressible
padding, ``coordinator/demo/race_function.py``) runs twice in one Spark application on a
standalone cluster (a master and a worker on each of 127.0.0.2-4, one core each), over the same
file-source input (one JSON file per batch) and through the same failures
(``coordinator/demo/streaming_race.py``):

- **spark**: ``groupBy("user").applyInPandasWithState`` with the RocksDB state store provider,
  changelog checkpointing on;
- **affinity**: ``stateful_foreach_batch``: the driver member and an embedded coordinator on a
  private ZooKeeper; each task runs on the executor its job model names and keeps a local copy of
  its state on that host.

Batch 0 fills the state (every user once). Phases: steady state; an executor killed (``kill
-9``; its worker starts a new one on the same host); a rolling restart of the workers (each worker
and its executor restarted, one batch after each); the application restarted from the same
checkpoints. Per phase and way: batch duration p50 / p95 (``triggerExecution`` of the query's
progress), the first batch after the failure, the state bytes loaded from checkpoints (Spark: the
RocksDB provider's ``rocksdbBytesCopied`` plus the bytes of the changelog files it replayed,
``rocksdbNumReplayChangelogFiles``; affinity: its restored-bytes counter), the share of stores
or tasks that found their state where they ran; and whether both outputs equal a single-process
reference.

Pinning overhead: a no-op stage of 100 and 1,000 tasks through ``run_pinned``, pinned (tasks
spread over the executors) and unpinned (the same stage, no placement), median of a few runs.

Throughput (``--throughput``, :mod:`benchmarks._throughput_report`): the same function both
ways (and the former driver path) at 100k, 1M and 4M rows a batch, seconds per batch, rows/s and
the peak RSS of the driver (Python and JVM) and the executors; its own section of the doc.

Usage: ``python benchmarks/spark_streaming.py [--quick] [--throughput] [--doc PATH] [--no-write]
[--json]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))
sys.path.insert(0, str(_ROOT / "examples" / "pipeline"))

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from functools import partial  # noqa: E402
from typing import Any  # noqa: E402

import structlog  # noqa: E402

from benchmarks._report import DOC, machine, median_time, table, write_section  # noqa: E402
from coordinator.demo.race_ways import WAYS, RaceBatch, RaceInput  # noqa: E402
from coordinator.demo.streaming_race import StreamingRace  # noqa: E402
from locality.spark import run_pinned  # noqa: E402

TARGET = 0.1  # affinity loads at most a tenth of Spark's bytes


@dataclass(frozen=True)
class Sizes:
    users: int
    pad: int  # state characters per user
    rows: int  # clicks per batch after the first
    tasks: int  # affinity tasks = Spark state partitions
    steady: int  # batches after the fill, before any failure
    per_phase: int  # batches after the executor kill and the application restart
    pinning: tuple[int, ...]  # stage sizes of the pinning overhead
    repeat: int

    @property
    def state_bytes(self) -> int:
        return self.users * self.pad


FULL = Sizes(
    users=2_000,
    pad=100_000,
    rows=200,
    tasks=8,
    steady=2,
    per_phase=2,
    pinning=(100, 1_000),
    repeat=2,
)
QUICK = Sizes(
    users=200, pad=2_000, rows=100, tasks=4, steady=1, per_phase=1, pinning=(100,), repeat=1
)
PHASES = ("steady state", "executor killed", "rolling restart", "application restarted")


def note(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run_race(race: StreamingRace, sizes: Sizes) -> None:
    """Fill, steady state, then each failure and the batches after it."""
    race.step("fill")
    for _ in range(sizes.steady):
        race.step(PHASES[0])
    race.kill_executor()
    for _ in range(sizes.per_phase):
        race.step(PHASES[1])
    race.rolling_restart(PHASES[2])
    race.restart_application()
    for _ in range(sizes.per_phase):
        race.step(PHASES[3])


def pinning_overhead(race: StreamingRace, sizes: Sizes) -> list[dict[str, Any]]:
    """Median seconds of a no-op stage of n tasks, pinned and unpinned."""
    sc = race.session.sparkContext
    executors = [e.executor_id for e in race.executors()]
    rows = []
    for n in sizes.pinning:
        tasks = {f"t{i}": None for i in range(n)}
        placement = {t: executors[i % len(executors)] for i, t in enumerate(tasks)}

        def stage(placed: dict[str, str], tasks: dict[str, None] = tasks) -> Any:
            return run_pinned(sc, tasks, placed, _noop, locality_wait="30s")

        stage({})  # warm-up
        unpinned, _ = median_time(partial(stage, {}), sizes.repeat)
        pinned, run = median_time(partial(stage, placement), sizes.repeat)
        rows.append(
            {
                "tasks": n,
                "unpinned_s": round(unpinned, 3),
                "pinned_s": round(pinned, 3),
                "pinned_ok": f"{run.pinned_ok}/{run.total}",
            }
        )
        note(f"pinning {n} tasks: unpinned {unpinned:.2f} s, pinned {pinned:.2f} s")
    return rows


def _noop(task: str, payload: None) -> None:
    return None


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def phase_figures(batches: list[RaceBatch], phase: str) -> dict[str, Any]:
    rows = [b for b in batches if b.phase == phase]
    seconds = [b.seconds for b in rows]
    tasks = sum(b.tasks for b in rows)
    return {
        "batches": len(rows),
        "p50_s": round(statistics.median(seconds), 3) if rows else None,
        "p95_s": round(_pct(seconds, 0.95), 3) if rows else None,
        "first_s": round(seconds[0], 3) if rows else None,
        "bytes_loaded": sum(b.bytes_loaded for b in rows),
        "warm_ratio": round(sum(b.warm for b in rows) / tasks, 4) if tasks else None,
    }


def figures(race: StreamingRace, sizes: Sizes, pinning: list[dict[str, Any]]) -> dict[str, Any]:
    batches = race.log.batches
    out: dict[str, Any] = {
        "sizes": sizes.__dict__ | {"state_bytes": sizes.state_bytes},
        "fill": {w: phase_figures(batches[w], "fill") for w in WAYS},
        "phases": {p: {w: phase_figures(batches[w], p) for w in WAYS} for p in PHASES},
        "outputs_equal_reference": race.outputs_equal(),
        "outputs_equal_each_other": race.ways["affinity"].outputs == race.ways["spark"].outputs,
        "pinning": pinning,
    }
    after = PHASES[1:]
    loaded = {w: sum(out["phases"][p][w]["bytes_loaded"] for p in after) for w in WAYS}
    out["bytes_loaded_after_failures"] = loaded
    out["target_met"] = loaded["affinity"] <= TARGET * loaded["spark"] and loaded["spark"] > 0
    return out


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def markdown(f: dict[str, Any], load: str) -> str:
    s = f["sizes"]
    rows = []
    for phase, per_way in [("fill (batch 0)", f["fill"]), *f["phases"].items()]:
        for way in WAYS:
            p = per_way[way]
            warm = "-" if p["warm_ratio"] is None else f"{p['warm_ratio']:.0%}"
            rows.append(
                [phase, way, p["batches"], _s(p["p50_s"]), _s(p["p95_s"]), _s(p["first_s"]),
                 _mib(p["bytes_loaded"]), warm]
            )  # fmt: skip
    phases = table(
        ["phase", "way", "batches", "p50", "p95", "first batch", "state loaded", "warm"], rows
    )
    pins = table(
        ["tasks", "unpinned (median)", "pinned (median)", "pinned ok"],
        [
            [p["tasks"], _s(p["unpinned_s"]), _s(p["pinned_s"]), p["pinned_ok"]]
            for p in f["pinning"]
        ],
    )
    loaded = f["bytes_loaded_after_failures"]
    ratio = loaded["affinity"] / loaded["spark"] if loaded["spark"] else float("nan")
    return "\n".join(
        [
            "## Stateful streaming: Spark's RocksDB state store vs stateful_foreach_batch",
            "",
            f"`benchmarks/spark_streaming.py` on {machine()}; load while measured: {load}.",
            f"State: {s['users']:,} users x {s['pad']:,} incompressible characters = "
            f"{_mib(s['state_bytes'])} per way; {s['rows']} clicks per batch; {s['tasks']} "
            "affinity tasks = Spark state partitions; 3 workers of one core, executors of 512 MB.",
            "",
            phases,
            "",
            f"- State loaded from checkpoints after the failures: affinity "
            f"{_mib(loaded['affinity'])}, Spark {_mib(loaded['spark'])} (ratio {ratio:.3f}; "
            f"target at most {TARGET}: **{'met' if f['target_met'] else 'NOT met'}**).",
            f"- Outputs equal the single-process reference: "
            f"{'yes' if f['outputs_equal_reference'] else 'NO'}; equal to each other: "
            f"{'yes' if f['outputs_equal_each_other'] else 'NO'}.",
            "- warm: affinity tasks whose state was in memory or in the host's local copy; Spark "
            "stores not loaded from the checkpoint (`rocksdbNumLoadedFromDfs`). In the fill "
            "batch affinity's tasks are new (not counted) and Spark's new stores load nothing.",
            "- Spark's state loaded is the changelog files its stores replayed "
            "(`rocksdbNumReplayChangelogFiles`, sizes read on the checkpoint) plus "
            "`rocksdbBytesCopied` (snapshot files; none is loaded while the stores have fewer "
            "than `minDeltasForSnapshot` = 10 versions).",
            "- Batch times follow the machine's load (other jobs share its 2 cores); the bytes "
            "do not.",
            "",
            "Pinning overhead (a no-op stage through `run_pinned`, pinned over the executors "
            "against the same stage with no placement):",
            "",
            pins,
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    parser.add_argument("--doc", type=Path, default=DOC, help="Markdown file to write")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON last")
    parser.add_argument("--throughput", action="store_true", help="rows/s at large batches")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    for name in ("kazoo", "py4j", "affinity", "metadata", "locality"):
        logging.getLogger(name).setLevel(logging.ERROR)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    if args.throughput:
        return throughput(args)
    with tempfile.TemporaryDirectory(prefix="spark-streaming-") as tmp:
        workdir = Path(tmp)
        source = RaceInput(workdir / "input", users=sizes.users, rows=sizes.rows, pad=sizes.pad)
        race = StreamingRace(workdir, source, tasks=sizes.tasks, note=note)
        try:
            race.start()
            run_race(race, sizes)
            pinning = pinning_overhead(race, sizes)
            result = figures(race, sizes, pinning)
        finally:
            race.stop()
    load = "load average " + ", ".join(f"{x:.1f}" for x in os.getloadavg())
    text = markdown(result, load)
    from rich.console import Console
    from rich.markdown import Markdown

    Console(stderr=False).print(Markdown(text))
    if not args.no_write:
        write_section("spark_streaming", text, doc=args.doc)
    if args.json:
        print(json.dumps(result))
    return 0 if result["outputs_equal_reference"] and result["target_met"] else 1


def throughput(args: argparse.Namespace) -> int:
    """``--throughput``: the runs of :mod:`benchmarks._throughput_report`, printed and written."""
    from benchmarks import _throughput_report as report

    sizes = report.QUICK_SIZES if args.quick else report.FULL_SIZES
    steady = 2 if args.quick else 3
    results = report.measure(sizes, steady, note)
    text = report.markdown(results, sizes, steady)
    from rich.console import Console
    from rich.markdown import Markdown

    Console(stderr=False).print(Markdown(text))
    if not args.no_write:
        write_section("spark_streaming_throughput", text, doc=args.doc)
    if args.json:
        print(json.dumps([r.__dict__ for r in results]))
    return 0 if report.goals(results, sizes).get("outputs equal between the ways") else 1


if __name__ == "__main__":
    raise SystemExit(main())
