"""A job of 1,000,000 partitions reaches DONE with the default barrier timeout (issue 16).

A private ZooKeeper, one real coordinator (``affinity coordinator run``) and three processors
(``affinity processor run``, at three locations) as processes, with the defaults of
``coordinator`` (barrier timeout 30 s) and a 10 s session. Reports the time from the processes'
start to the first DONE barrier, every barrier state on the way, what each processor runs, and
the peak memory (RSS) of the coordinator and of a processor. Not in ``make test``; a small size
in ``tests/integration/test_zk_benchmark.py``.

Usage: ``python benchmarks/million_partitions.py [--partitions N] [--timeout-s S]
[--grouper-timeout-ms MS]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))
sys.path.insert(0, str(_ROOT / "tests"))

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import structlog  # noqa: E402
from jobharness import JobHarness  # noqa: E402

from coordinator.demo.zookeeper import EmbeddedZooKeeper  # noqa: E402

PROCESSORS = ("p-1", "p-2", "p-3")


def peak_mb(pid: int) -> float:
    """Peak resident memory (VmHWM) of a live process, in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def grouper_runs(log: Path) -> list[str]:
    """``<seconds> s ok|failed`` of each grouper run, from the coordinator's JSON log."""
    runs = []
    for line in log.read_text(errors="replace").splitlines():
        if '"coordinator.grouper_ran"' in line:
            record = json.loads(line)
            runs.append(f"{record['seconds']:.1f} s {'ok' if record['ok'] else 'failed'}")
    return runs


def run(partitions: int, timeout_s: float, grouper_timeout_ms: int | None) -> int:
    with tempfile.TemporaryDirectory(prefix="million-") as workdir:
        server = EmbeddedZooKeeper(Path(workdir) / "zk", heap_mb=3072)
        server.start()
        job = JobHarness(
            server,
            Path(workdir) / "job",
            partitions=partitions,
            session_timeout_ms=10_000,
            debounce_ms=2000,
            debounce_max_ms=10_000,
            barrier_timeout_ms=30_000,
        )
        if grouper_timeout_ms is not None:  # else the default, 30 s
            text = job.config.read_text().replace(
                "grouper: {name: host-affinity,",
                f"grouper: {{name: host-affinity, timeout_ms: {grouper_timeout_ms},",
            )
            job.config.write_text(text)
        try:
            started = time.monotonic()
            for i, pid in enumerate(PROCESSORS):
                job.start_processor(pid, f"zone-{i}/node-{i}")
            coordinator = job.start_coordinator("c-1")
            states: dict[int, str | None] = {}
            done = None
            while time.monotonic() - started < timeout_s and done is None:
                time.sleep(0.5)
                latest = job.store.job_models.latest_version()
                for version in range(1, (latest or 0) + 1):
                    state = job.store.barriers.state(version)
                    if states.get(version) != state:
                        states[version] = state
                        print(f"{time.monotonic() - started:6.1f} s  barrier {version}: {state}")
                    if state == "DONE":
                        done = version
            seconds = time.monotonic() - started
            while time.monotonic() - started < timeout_s and done is not None:
                if sum(len(job.running(pid)) for pid in PROCESSORS) == partitions:
                    break
                time.sleep(0.5)
            running = {pid: len(job.running(pid)) for pid in PROCESSORS}
            print(
                f"partitions {partitions:,}: DONE at version {done} after {seconds:.1f} s; "
                f"running {running} ({sum(running.values()):,} tasks) after "
                f"{time.monotonic() - started:.1f} s; coordinator peak RSS "
                f"{peak_mb(coordinator.popen.pid):,.0f} MB, processor peak RSS "
                f"{peak_mb(job.processors['p-1'].popen.pid):,.0f} MB; grouper runs "
                f"{grouper_runs(coordinator.log)}; "
                f"load average {', '.join(f'{v:.1f}' for v in os.getloadavg())}"
            )
            if done is not None and sum(running.values()) == partitions:
                return 0
            for proc in [coordinator, job.processors["p-1"]]:
                print(f"--- {proc.name} (last lines)")
                print("\n".join(proc.log.read_text(errors="replace").splitlines()[-15:]))
            return 1
        finally:
            job.stop_all()
            server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--partitions", type=int, default=1_000_000)
    parser.add_argument("--timeout-s", type=float, default=900.0)
    parser.add_argument(
        "--grouper-timeout-ms", type=int, default=None, help="grouper.timeout_ms (default 30000)"
    )
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    return run(args.partitions, args.timeout_s, args.grouper_timeout_ms)


if __name__ == "__main__":
    raise SystemExit(main())
