"""Streaming soak: the file query and the Kafka query under random faults for N minutes.

The machinery is ``tests/spark/streaming_soak.py`` (``make test`` runs it briefly,
``tests/spark/test_streaming_soak.py``): both queries on a 3-worker standalone cluster in an
application with ``spark.speculation`` on, a private ZooKeeper and a Kafka broker (KRaft). Until
the time is up the soak draws, with ``random.Random(seed)``, one fault (weights in
``streaming_soak.FAULTS``: executor killed mid-stage, worker killed, a slow first attempt with
a speculative copy, the sink crashing before the commit, the driver stopping right after
affinity's commit, ZooKeeper restarted, the broker restarted, the application restarted, a fresh
Spark checkpoint location) and a query it fits, runs one batch around it and one to three plain
batches, and after every batch checks: the state read back from durable storage along the
commit's chain heads equals a single-process reference (each record counted once, no committed
file missing), and every delivery of every batch equals the reference output (at least once).
A mismatch is a violation (the soak goes on).

Usage: ``python benchmarks/streaming_soak.py [--minutes 30] [--seed N] [--doc PATH]
[--no-write]`` (not part of ``make test``).
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_ROOT = _HERE.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_ROOT))
sys.path.insert(0, str(_ROOT / "tests" / "spark"))

import argparse  # noqa: E402
import logging  # noqa: E402
import random  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from collections import Counter  # noqa: E402

import structlog  # noqa: E402
from affinity_pipeline.cluster import StandaloneCluster  # noqa: E402
from spark_app import WORKER_HOSTS  # noqa: E402
from streaming_soak import FAULTS, FILE_ONLY, KAFKA_ONLY, TASKS, StreamingSoak  # noqa: E402

from benchmarks._report import DOC, machine, table, write_section  # noqa: E402
from coordinator.launchers.kafka import KafkaBroker  # noqa: E402
from coordinator.launchers.zookeeper import EmbeddedZooKeeper  # noqa: E402


def draw(rng: random.Random) -> tuple[str, str]:
    """A fault kind by weight, and a query it fits."""
    kinds = sorted(FAULTS)
    kind = rng.choices(kinds, weights=[FAULTS[k] for k in kinds])[0]
    if kind in FILE_ONLY:
        return kind, "file"
    if kind in KAFKA_ONLY:
        return kind, "kafka"
    return kind, rng.choice(["file", "kafka"])


def soak(minutes: float, seed: int, workdir: Path) -> dict[str, object]:
    rng = random.Random(seed)
    zk = EmbeddedZooKeeper(workdir / "zookeeper").start()
    broker = KafkaBroker(workdir / "kafka").start()
    cluster = StandaloneCluster(workdir / "spark", WORKER_HOSTS).start()
    topic = "soak-keys"
    broker.create_topic(topic, TASKS)
    run = StreamingSoak(cluster, zk, broker, topic, workdir / "soak", print)
    violations: list[str] = []
    errors: Counter[str] = Counter()
    began = time.monotonic()
    try:
        run.start()
        while time.monotonic() - began < minutes * 60:
            kind, which = draw(rng)
            try:
                violations += run.fault(kind, which)
                for _ in range(rng.randint(1, 3)):
                    violations += run.fault("none", rng.choice(["file", "kafka"]))
            except Exception as exc:  # a step that could not finish: a violation too
                errors[kind] += 1
                violations.append(f"{kind} on {which}: {type(exc).__name__}: {exc}"[:300])
                traceback.print_exc()
                break
    finally:
        run.stop()
        cluster.stop()
        broker.stop()
        zk.stop()
    return {
        "minutes": (time.monotonic() - began) / 60,
        "seed": seed,
        "faults": dict(run.faults),
        "batches": run.batches,
        "violations": violations,
        "errors": dict(errors),
    }


def report(result: dict[str, object]) -> str:
    faults: dict[str, int] = result["faults"]  # type: ignore[assignment]
    violations: list[str] = result["violations"]  # type: ignore[assignment]
    summary = table(
        ["soak", "time", "faults", "batches checked", "violations"],
        [
            [
                "streaming",
                f"{result['minutes']:.1f} min",
                sum(n for k, n in faults.items() if k != "none"),
                result["batches"],
                len(violations),
            ]
        ],
    )
    kinds = table(["fault", "times"], [[k, n] for k, n in sorted(faults.items()) if k != "none"])
    lines = [
        "## Streaming soak: random faults on the 3-worker cluster (`benchmarks/streaming_soak.py`)",
        "",
        f"{machine()}; seed {result['seed']}. The file query and the Kafka query (4 tasks each), "
        "one application with `spark.speculation` on; after every batch the durable state (read "
        "along the commit's chain heads) and every delivered output are compared with a "
        "single-process reference, and each query's output topic (exactly-once delivery: the "
        "Kafka query's, and the file query's through `stateful_foreach_batch(output_topic=...)`) "
        "is read committed: each reference output record once.",
        "",
        summary,
        "",
        kinds,
    ]
    if violations:
        lines += ["", "Violations:", ""] + [f"- {v}" for v in violations[:20]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--doc", type=Path, default=DOC)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    with tempfile.TemporaryDirectory(prefix="affinity-streaming-soak-") as tmp:
        result = soak(args.minutes, seed, Path(tmp))
    markdown = report(result)
    print(markdown)
    if not args.no_write:
        write_section("streaming-soak", markdown, args.doc)
    return 0 if not result["violations"] else 1


if __name__ == "__main__":
    sys.exit(main())
