"""The ZooKeeper metadata store on a real ZooKeeper: job-model size and speed, locality writes.

For T = 100,000 and 1,000,000 tasks (P = 100 processors), on a private ZooKeeper server
(Debian's package, ``tests/zkserver.py``) on loopback:

- job model: JSON bytes (format 2, columns), bytes stored in ZooKeeper (zlib), number of chunk
  nodes and container views and the largest node; median wall time to publish (encode,
  compress, write the chunks and views, commit the manifest + version + barrier in one fenced
  transaction), for a processor to read its own container (manifest + its view: read, verify,
  decompress, decode; median over 10 processors) and to read the whole model back; the
  memory of the process (RSS) once the model is built and its peak while publishing;
- task locality (one node per task): time, write operations and transactions of a full write
  (an empty store), of a rewrite with 1% of the tasks moved to another location, and of a full
  read. Write operations are counted by the store (``ZkMetadataStore.ops``).

A goals table compares the largest size with the goals of issue 16 and the figures before format 2.

Usage: ``python benchmarks/zk_store.py [--quick] [--doc PATH] [--no-write]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))
sys.path.insert(0, str(_ROOT / "tests"))

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import structlog  # noqa: E402

from benchmarks._report import DOC, machine, median_time, table, write_section  # noqa: E402
from coordinator.launchers.zookeeper import EmbeddedZooKeeper as ZooKeeperServer  # noqa: E402
from metadata.model import (  # noqa: E402
    ContainerModel,
    FrozenMap,
    JobModel,
    SystemStreamPartition,
    TaskModel,
)
from metadata.zk import ZkMetadataStore, connect  # noqa: E402

FULL = (100_000, 1_000_000)
QUICK = (1_000, 10_000)
PROCESSORS = 100
#: (what, goal in seconds, before format 2 at 1,000,000 tasks) of issue 16.
GOALS = (
    ("publish", 2.0, "7.97 s"),
    ("own container read", 0.050, "16.06 s (whole model)"),
    ("1% locality rewrite", 1.0, "9.22 s"),
)


@dataclass
class JobModelRow:
    tasks: int
    json_bytes: int
    stored_bytes: int
    chunks: int
    views: int
    largest_node: int
    publish_s: float
    publish_cpu_s: float
    container_s: float
    container_cpu_s: float
    read_s: float
    runs: int
    model_mb: float
    publish_peak_mb: float


@dataclass
class LocalityRow:
    tasks: int
    full_s: float
    full_ops: int
    full_transactions: int
    changed_s: float
    changed_cpu_s: float
    changed_ops: int
    changed_transactions: int
    read_s: float


def build_model(tasks: int, processors: int = PROCESSORS) -> JobModel:
    containers = {}
    for p in range(processors):
        owned = {}
        for i in range(p, tasks, processors):
            task = TaskModel(
                f"Partition {i}", frozenset({SystemStreamPartition("kafka", "events", i)}), i
            )
            owned[task.name] = task
        pid = f"processor-{p}"
        containers[pid] = ContainerModel(pid, f"zone-{p % 3}/node-{p}", FrozenMap(owned))
    return JobModel(1, FrozenMap(containers), FrozenMap({"job.name": "bench"}))


def node_sizes(store: ZkMetadataStore, version: int) -> list[int]:
    folder = f"{store.layout.folder}/jobModels/{version}"
    names = store.client.get_children(folder)
    sizes = [len(store.client.get(folder)[0])]
    sizes += [len(store.client.get(f"{folder}/{name}")[0]) for name in names]
    return sizes


def rss_mb(field: str = "VmRSS") -> float:
    """This process's resident memory (``VmHWM``: its peak since :func:`reset_peak`), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak() -> None:
    """Start ``VmHWM`` again from the current RSS (Linux: ``clear_refs`` 5)."""
    Path("/proc/self/clear_refs").write_text("5")


def container_time(store: ZkMetadataStore, model: JobModel, version: int) -> tuple[float, float]:
    """Median wall and CPU time for a processor to read its own container (manifest + view),
    10 of them."""
    times, cpu = [], []
    for pid in list(model.containers)[:: max(1, len(model.containers) // 10)][:10]:
        started, started_cpu = time.perf_counter(), time.process_time()
        container = store.job_models.read_container(version, pid)
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
        if container != model.containers[pid]:
            raise AssertionError(f"the container of {pid} read back differs")
    return statistics.median(times), statistics.median(cpu)


def bench_job_model(server: ZooKeeperServer, tasks: int, repeat: int) -> JobModelRow:
    client = connect(server.hosts, session_timeout_s=30.0)
    try:
        store = ZkMetadataStore(client, f"/bench/jobmodel-{tasks}", run_id="bench")
        store.ensure_layout()
        epoch = store.epochs.acquire()
        gc.collect()
        before_mb = rss_mb()
        model = build_model(tasks)
        model_mb = rss_mb() - before_mb
        reset_peak()
        versions = iter(range(1, repeat + 2))
        participants = list(model.containers)

        cpu: list[float] = []

        def publish() -> int:
            version = next(versions)
            started_cpu = time.process_time()
            store.job_models.publish(
                JobModel(version, model.containers, model.config),
                epoch=epoch,
                participants=participants,
                grouper="host-affinity",
            )
            cpu.append(time.process_time() - started_cpu)
            return version

        publish_s, version = median_time(publish, repeat)
        publish_peak_mb = rss_mb("VmHWM") - before_mb
        container_s, container_cpu_s = container_time(store, model, version)
        read_s, read_back = median_time(lambda: store.job_models.read(version), repeat)
        if read_back.containers != model.containers:
            raise AssertionError("the job model read back differs from the one published")
        manifest = json.loads(store.client.get(f"{store.layout.folder}/jobModels/{version}")[0])
        sizes = node_sizes(store, version)
        return JobModelRow(
            tasks=tasks,
            json_bytes=manifest["raw_size"],
            stored_bytes=sum(sizes),
            chunks=len(manifest["chunks"]),
            views=len(manifest.get("views") or manifest.get("view_spans") or []),
            largest_node=max(sizes),
            publish_s=publish_s,
            publish_cpu_s=statistics.median(cpu),
            container_s=container_s,
            container_cpu_s=container_cpu_s,
            read_s=read_s,
            runs=repeat,
            model_mb=model_mb,
            publish_peak_mb=publish_peak_mb,
        )
    finally:
        client.stop()
        client.close()


def bench_locality(server: ZooKeeperServer, tasks: int) -> LocalityRow:
    client = connect(server.hosts, session_timeout_s=30.0)
    try:
        store = ZkMetadataStore(
            client, f"/bench/locality-{tasks}", run_id="bench", retry_deadline_s=120.0
        )
        store.ensure_layout()
        locality = {f"Partition {i}": f"zone-{i % 3}/node-{i % PROCESSORS}" for i in range(tasks)}

        transactions = store.transactions
        started = time.perf_counter()
        full_ops = store.locality.write(locality)
        full_s = time.perf_counter() - started
        full_transactions = store.transactions - transactions

        for i in range(0, tasks, 100):  # 1% of the tasks move
            locality[f"Partition {i}"] = "zone-9/elsewhere"
        transactions = store.transactions
        started, started_cpu = time.perf_counter(), time.process_time()
        changed_ops = store.locality.write(locality)
        changed_s = time.perf_counter() - started
        changed_cpu_s = time.process_time() - started_cpu
        changed_transactions = store.transactions - transactions

        read_s, read_back = median_time(store.locality.read, 1)
        if read_back != locality:
            raise AssertionError("the locality read back differs from the one written")
        return LocalityRow(
            tasks=tasks,
            full_s=full_s,
            full_ops=full_ops,
            full_transactions=full_transactions,
            changed_s=changed_s,
            changed_cpu_s=changed_cpu_s,
            changed_ops=changed_ops,
            changed_transactions=changed_transactions,
            read_s=read_s,
        )
    finally:
        client.stop()
        client.close()


def megabytes(count: int) -> str:
    return f"{count / 1_000_000:,.2f} MB"


def seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def goals_table(model: JobModelRow, locality: LocalityRow) -> str:
    now = (
        (model.publish_s, model.publish_cpu_s),
        (model.container_s, model.container_cpu_s),
        (locality.changed_s, locality.changed_cpu_s),
    )
    return table(
        [f"at {model.tasks:,} tasks", "goal", "before format 2", "now", "CPU", "met"],
        [
            [
                what,
                seconds(goal),
                before,
                seconds(wall),
                seconds(cpu),
                "yes" if wall <= goal else ("CPU only" if cpu <= goal else "no"),
            ]
            for (what, goal, before), (wall, cpu) in zip(GOALS, now, strict=True)
        ],
    )


def model_table(models: list[JobModelRow]) -> str:
    return table(
        [
            "tasks",
            "JSON",
            "stored",
            "chunks",
            "views",
            "largest node",
            "publish",
            "own container",
            "whole read",
            "model RSS",
            "publish peak",
            "runs",
        ],
        [
            [
                f"{r.tasks:,}",
                megabytes(r.json_bytes),
                megabytes(r.stored_bytes),
                r.chunks,
                r.views,
                f"{r.largest_node:,} B",
                seconds(r.publish_s),
                seconds(r.container_s),
                seconds(r.read_s),
                f"{r.model_mb:,.0f} MB",
                f"+{r.publish_peak_mb - r.model_mb:,.0f} MB",
                r.runs,
            ]
            for r in models
        ],
    )


def report(
    models: list[JobModelRow], localities: list[LocalityRow], seconds_total: float, load: str
) -> str:
    models_table = model_table(models)
    locality_table = table(
        ["tasks", "full write", "ops", "txns", "1% write", "ops", "txns", "full read"],
        [
            [
                f"{r.tasks:,}",
                f"{r.full_s:.2f} s",
                f"{r.full_ops:,}",
                r.full_transactions,
                f"{r.changed_s:.2f} s",
                f"{r.changed_ops:,}",
                r.changed_transactions,
                f"{r.read_s:.2f} s",
            ]
            for r in localities
        ],
    )
    return (
        "## ZooKeeper metadata store (`benchmarks/zk_store.py`)\n\n"
        f"A private ZooKeeper 3.8 (Debian package) on loopback; {machine()}; load average "
        f"{load} (the machine is shared); {PROCESSORS} processors; total run "
        f"{seconds_total:.0f} s. Re-run: `python benchmarks/zk_store.py`.\n\n"
        f"{goals_table(models[-1], localities[-1])}\n\n"
        "now = wall time; CPU = this process's CPU time for it (the client's share: the "
        "ZooKeeper server's own work is not in it); met = within the goal in wall time, or in "
        "CPU time only (on a loaded machine the wall time waits for a core).\n\n"
        "Job model (format 2: columns, zlib-compressed, chunks of at most 900,000 bytes; "
        "ZooKeeper's limit is 1,048,575 bytes per node; views = container views, each a small "
        "format-2 document of a few processors' containers). Publish = encode + compress + "
        "write chunks and views + one fenced commit transaction; own container = what a "
        "processor reads: manifest + its view, verified, decompressed, decoded (median of 10 "
        "processors); whole read = read + verify + decompress + decode of the whole model; "
        "median over the runs. Model RSS = the process's resident memory grown by building the "
        "model (the coordinator holds one or two of them); publish peak = its peak above that "
        "while publishing.\n\n"
        f"{models_table}\n\n"
        "Task locality, one node per task. Full write = every task into an empty store; 1% write "
        "= the same map with 1% of the tasks moved (the store knows what it wrote, so it reads "
        "no entry, only the marker and `localityWrites`; another writer since makes it read "
        "with multiRead requests); ops = write operations counted by the store; txns = "
        "transactions (each under the 1 MB request limit).\n\n"
        f"{locality_table}\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    parser.add_argument("--doc", type=Path, default=DOC, help="Markdown file to write")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    sizes = QUICK if args.quick else FULL
    started = time.perf_counter()
    models, localities = [], []
    with tempfile.TemporaryDirectory(prefix="zk-bench-") as workdir:
        server = ZooKeeperServer(Path(workdir), heap_mb=3072)
        server.start()
        try:
            for tasks in sizes:
                repeat = 3 if tasks <= 100_000 else 1
                print(f"job model, {tasks:,} tasks ...", flush=True)
                models.append(bench_job_model(server, tasks, repeat))
                print(f"locality, {tasks:,} tasks ...", flush=True)
                localities.append(bench_locality(server, tasks))
        finally:
            server.stop()
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    markdown = report(models, localities, time.perf_counter() - started, load)
    print()
    print(markdown)
    if not args.no_write:
        write_section("zk_store", markdown, doc=args.doc)
        print(f"wrote section 'zk_store' of {args.doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
