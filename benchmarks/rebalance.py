"""Rebalance latency (a processor's death to barrier DONE), CPU and ZooKeeper requests per
rebalance, up to P = 1,000 processors.

For P = 10, 100, 300 and 1,000 processors and T = 10,000 tasks, on a private ZooKeeper server
(:class:`coordinator.launchers.zookeeper.EmbeddedZooKeeper`) on loopback:

- one :class:`coordinator.leader.service.CoordinatorService` (the real leader: election, epoch,
  watches, the ``host-affinity`` grouper in its worker process, fenced publishes) with its own
  KazooClient, in this process;
- P :class:`coordinator.member.processor.ProcessorClient` instances, each with its own
  KazooClient (a real session) and thread, spread over a few worker processes
  (``benchmarks/_rebalance_workers.py``), one location per processor.

A *death* is a processor's session closed without unregistering (``client.stop()``): ZooKeeper
deletes its ephemeral registration at once. An observer (a separate client) polls that node and
times from the moment it is gone to the moment barrier v+1 reads ``DONE`` (a DataWatch), and
also the moment ``jobModelVersion`` says v+1 (published). After each death the benchmark waits
until every survivor runs v+1 and has written its task locality, and counts the rebalance's
CPU (per process, from /proc) and ZooKeeper requests (every KazooClient call, watch re-reads
included). The section it writes (``benchmarks/_rebalance_report.py``) compares them with
issue 16's goals.

Usage: ``python benchmarks/rebalance.py [--quick] [--sizes P:T,...] [--deaths N]
[--workers N] [--debounce-ms MS] [--doc PATH] [--no-write]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_ROOT = _HERE.parent
# benchmarks/groupers.py would shadow the groupers package the coordinator imports.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_ROOT))
sys.path.insert(0, str(_ROOT / "tests"))

import argparse  # noqa: E402
import random  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from benchmarks._rebalance_job import PER_WORKER, Job, workers_for  # noqa: E402
from benchmarks._rebalance_report import Row, report  # noqa: E402
from benchmarks._rebalance_workers import (  # noqa: E402
    count_requests,
    quiet,
)
from benchmarks._reference import get_round_trip_cpu  # noqa: E402
from benchmarks._report import DOC, median_time, write_section  # noqa: E402
from coordinator.launchers.zookeeper import EmbeddedZooKeeper as ZooKeeperServer  # noqa: E402

FULL = ((10, 10_000), (100, 10_000), (300, 10_000), (1000, 10_000))
QUICK = ((5, 1_000), (10, 1_000))


def bench(
    server: ZooKeeperServer,
    processors: int,
    tasks: int,
    deaths: int,
    debounce_ms: int,
    seed: int,
    workers: int,
) -> Row:
    row = Row(processors, tasks, debounce_ms / 1000, workers)
    job = Job(server, processors, tasks, debounce_ms, workers)
    rng = random.Random(seed)
    before = get_round_trip_cpu(server.hosts)
    try:
        started = time.perf_counter()
        job.start()
        print(f"  P={processors}: settled in {time.perf_counter() - started:.1f} s", flush=True)
        for n in range(deaths):
            victim = rng.choice(job.live())
            death = job.kill(victim)
            row.deaths.append(death)
            print(
                f"  death {n + 1}/{deaths} ({victim}): DONE {death.gone_to_done * 1000:.0f} ms"
                f" after the node vanished (published after "
                f"{death.gone_to_published * 1000:.0f} ms; joins +{death.first_join * 1000:.0f}"
                f"..+{death.last_join * 1000:.0f} ms, DONE +{death.last_join_to_done * 1000:.0f}"
                f" ms after the last), {death.moved} tasks moved; survivor CPU "
                f"{death.survivor_cpu * 1000:.2f} ms, requests {death.coordinator_requests} + "
                f"{death.processor_requests}, load {death.load:.1f}",
                flush=True,
            )
        version = job.view.job_models.latest_version()
        assert version is not None
        row.decode_s, _ = median_time(lambda: job.view.job_models.read(version), 3)
        pid = job.live()[0]
        row.view_s, _ = median_time(lambda: job.view.job_models.read_container(version, pid), 5)
    finally:
        job.stop()
    row.reference_s = (before, get_round_trip_cpu(server.hosts))
    after = row.reference_s[1]
    print(f"  a plain get's CPU: {before * 1e6:.0f} us before, {after * 1e6:.0f} us after")
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    parser.add_argument("--sizes", default=None, help="P:T pairs, e.g. 1000:10000,300:10000")
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help=f"processes hosting the processors (default: one per {PER_WORKER}, at least 4)",
    )
    parser.add_argument("--deaths", type=int, default=None, help="deaths per size (5; quick 2)")
    parser.add_argument("--debounce-ms", type=int, default=None, help="1000 (quick: 200)")
    parser.add_argument("--seed", type=int, default=7, help="which processors die")
    parser.add_argument("--doc", type=Path, default=DOC, help="Markdown file to write")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    quiet()
    count_requests()
    sizes = QUICK if args.quick else FULL
    if args.sizes:
        sizes = tuple(
            (int(p), int(t)) for p, t in (pair.split(":") for pair in args.sizes.split(","))
        )
    deaths = args.deaths or (2 if args.quick else 5)
    debounce_ms = (
        args.debounce_ms if args.debounce_ms is not None else (200 if args.quick else 1000)
    )
    started = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="rebalance-bench-") as workdir:
        server = ZooKeeperServer(Path(workdir), heap_mb=2048)
        server.start()
        try:
            for processors, tasks in sizes:
                workers = workers_for(processors, args.workers)
                print(
                    f"P={processors}, T={tasks:,}, debounce {debounce_ms} ms, "
                    f"{workers} worker processes ...",
                    flush=True,
                )
                rows.append(
                    bench(server, processors, tasks, deaths, debounce_ms, args.seed, workers)
                )
        finally:
            server.stop()
    markdown = report(rows, deaths, time.perf_counter() - started, argv_text(argv))
    print()
    print(markdown)
    if not args.no_write:
        write_section("rebalance", markdown, doc=args.doc)
        print(f"wrote section 'rebalance' of {args.doc}")
    return 0


def argv_text(argv: list[str] | None) -> str:
    given = sys.argv[1:] if argv is None else argv
    return " ".join(["python benchmarks/rebalance.py", *given])


if __name__ == "__main__":
    raise SystemExit(main())
