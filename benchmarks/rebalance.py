"""Rebalance latency (a processor's death to barrier DONE) and ZooKeeper operations per rebalance.

For P = 10, 50 and 100 processors and T = 10,000 tasks, on a private ZooKeeper server (Debian's
package, ``tests/zkserver.py``) on loopback, in one Python process:

- one :class:`coordinator.leader.service.CoordinatorService` (the real leader: election, epoch,
  watches, the ``host-affinity`` grouper, fenced publishes) with its own KazooClient;
- P :class:`coordinator.member.processor.ProcessorClient` instances, each with its own
  KazooClient (a real session) and its own thread, one location per processor
  (``zone-<i % 3>/host-<i>``).

A *death* is a processor's session closed without unregistering (``client.stop()``): ZooKeeper
deletes its ephemeral registration at once. An observer (a separate client) polls that node and
times from the moment it is gone to the moment barrier v+1 reads ``DONE`` (a DataWatch), and
also the moment ``jobModelVersion`` says v+1 (published). After each death the benchmark waits
until every survivor runs v+1 and has written its task locality, and counts the ZooKeeper
operations of the rebalance with the stores' counters (``ZkMetadataStore.ops`` = writes,
``reads``): the coordinator's store, and the sum over the survivors' stores. Reads made by
kazoo's watch recipes themselves (re-reading a watched node) are not counted.

The table gives the median over several deaths per size, the debounce used, and the overhead
beyond it. After a publish, every survivor reads only its own container (the manifest and one
container view of a few KB, see ``metadata/zk_jobmodels.py``) and watches only the barrier's
state, so the survivors' work after a publish is P small reads and P joins; the table also gives
the time to read one container view and, for comparison, to read and decode the whole model.

Usage: ``python benchmarks/rebalance.py [--quick] [--sizes P:T,...] [--deaths N]
[--debounce-ms MS] [--doc PATH] [--no-write]``.
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
import logging  # noqa: E402
import multiprocessing  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Mapping  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from multiprocessing.connection import Connection  # noqa: E402
from multiprocessing.process import BaseProcess  # noqa: E402
from typing import Any  # noqa: E402

import structlog  # noqa: E402
from kazoo.client import KazooClient  # noqa: E402
from kazoo.protocol.states import ZnodeStat  # noqa: E402
from kazoo.recipe.watchers import DataWatch  # noqa: E402

from benchmarks._report import DOC, machine, median_time, table, write_section  # noqa: E402
from coordinator.config import JobConfig, load_config  # noqa: E402
from coordinator.demo.zookeeper import EmbeddedZooKeeper as ZooKeeperServer  # noqa: E402
from coordinator.leader.service import CoordinatorService  # noqa: E402
from coordinator.member.processor import ProcessorClient  # noqa: E402
from groupers.measures import tasks_moved  # noqa: E402
from metadata.model import BarrierState, TaskModel  # noqa: E402
from metadata.zk import ZkMetadataStore, connect  # noqa: E402

FULL = ((10, 10_000), (50, 10_000), (100, 10_000))
QUICK = ((5, 1_000), (10, 1_000))
SESSION_TIMEOUT_S = 30.0
SETTLE_TIMEOUT_S = 600.0


@dataclass
class Processor:
    """One processor client, in a worker process."""

    pid: str
    client: KazooClient
    store: ZkMetadataStore
    agent: ProcessorClient
    stop: threading.Event
    thread: threading.Thread
    alive: bool = True


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU time of process ``pid`` (all its threads) so far, from /proc."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _quiet() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("kazoo").setLevel(logging.ERROR)


def worker_main(
    conn: Connection,
    hosts: str,
    job_folder: str,
    run_id: str,
    job_name: str,
    members: list[tuple[str, str, str]],
) -> None:
    """A worker process: hosts the processors ``members`` (id, location, host), each with its
    own ZooKeeper session and thread, and answers the parent's commands on ``conn``:
    ``("kill", pid)`` closes that processor's session without unregistering (a death);
    ``("status", None)`` gives each live processor's (running version, store writes, reads);
    ``("stop", None)`` stops them all and ends the process."""
    _quiet()
    processors: dict[str, Processor] = {}
    for pid, location, host in members:
        client = connect(hosts, session_timeout_s=SESSION_TIMEOUT_S)
        store = ZkMetadataStore(client, job_folder, run_id=run_id, retry_deadline_s=120)
        agent = ProcessorClient(
            client, store, pid, location, on_start=_ignore, on_stop=_ignore, host=host, job=job_name
        )
        stop = threading.Event()
        thread = threading.Thread(target=agent.run, args=(stop,), name=pid, daemon=True)
        thread.start()
        processors[pid] = Processor(pid, client, store, agent, stop, thread)
    conn.send("ready")
    while True:
        command, argument = conn.recv()
        if command == "kill":
            victim = processors[str(argument)]
            victim.alive = False
            victim.client.stop()
            conn.send(True)
        elif command == "status":
            conn.send(
                {
                    p.pid: (p.agent.running_version, p.store.ops, p.store.reads)
                    for p in processors.values()
                    if p.alive
                }
            )
        elif command == "stop":
            for processor in processors.values():
                processor.stop.set()
            for processor in processors.values():
                processor.thread.join(30)
                if processor.alive:
                    processor.client.stop()
                processor.client.close()
            conn.send(True)
            return


@dataclass
class Death:
    gone_to_published: float
    published_to_done: float
    gone_to_done: float
    coordinator_writes: int
    coordinator_reads: int
    processor_writes: int
    processor_reads: int
    moved: int
    cpu_processors: float = 0.0
    cpu_coordinator: float = 0.0
    cpu_zookeeper: float = 0.0
    first_join: float = 0.0
    last_join: float = 0.0
    last_join_to_done: float = 0.0


@dataclass
class Row:
    processors: int
    tasks: int
    debounce_s: float
    deaths: list[Death] = field(default_factory=list)
    decode_s: float = 0.0
    view_s: float = 0.0

    def median(self, pick: Callable[[Death], float]) -> float:
        return statistics.median(pick(d) for d in self.deaths)


def job_config(hosts: str, name: str, tasks: int, debounce_ms: int) -> JobConfig:
    return load_config(
        data={
            "job": {"name": name, "id": "1", "run_id": "r1"},
            "zookeeper": {
                "connect": hosts,
                "root": "/bench-rebalance",
                "session_timeout_ms": int(SESSION_TIMEOUT_S * 1000),
            },
            "inputs": [{"system": "kafka", "stream": "events", "partitions": tasks}],
            "grouper": {"name": "host-affinity"},
            "coordinator": {
                "debounce_ms": debounce_ms,
                "debounce_max_ms": max(10_000, debounce_ms),
                "barrier_timeout_ms": 300_000,
                "http_port": 0,
            },
        },
        environ={},
    )


def wait(predicate: Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(poll_s)


def _ignore(version: int | None, tasks: Mapping[str, TaskModel]) -> None:
    return None


class Job:
    """One job: a coordinator (in this process) and P processors (in worker processes), on its
    own job folder."""

    def __init__(
        self,
        server: ZooKeeperServer,
        processors: int,
        tasks: int,
        debounce_ms: int,
        workers: int = 4,
    ) -> None:
        name = f"p{processors}-t{tasks}"
        self.config = job_config(server.hosts, name, tasks, debounce_ms)
        self.hosts = server.hosts
        self.server_pid = server.pid
        self.size = processors
        self.workers = max(1, min(workers, processors))
        self.pipes: list[Connection] = []
        self.processes: list[BaseProcess] = []
        self.home: dict[str, int] = {}  # processor id -> worker index
        self.alive: set[str] = set()
        self.observer = connect(self.hosts, session_timeout_s=SESSION_TIMEOUT_S)
        self.view = self.store(self.observer)
        self.view.ensure_layout()
        self.coordinator_client: KazooClient | None = None
        self.coordinator: CoordinatorService | None = None
        self.coordinator_stop = threading.Event()
        self.coordinator_thread: threading.Thread | None = None

    def store(self, client: KazooClient) -> ZkMetadataStore:
        return ZkMetadataStore(
            client, self.config.job_folder, run_id=self.config.job.run_id, retry_deadline_s=120
        )

    def cpu(self) -> tuple[float, float, float]:
        """CPU seconds so far: the worker processes, this process (coordinator and observer),
        the ZooKeeper server."""
        return (
            sum(cpu_seconds(p.pid) for p in self.processes),
            cpu_seconds(os.getpid()),
            cpu_seconds(self.server_pid),
        )

    def ask(self, worker: int, command: str, argument: object = None) -> Any:
        self.pipes[worker].send((command, argument))
        if not self.pipes[worker].poll(120):
            raise TimeoutError(f"worker {worker} did not answer {command!r}")
        return self.pipes[worker].recv()

    # ------------------------------------------------------------------ life cycle

    def start(self) -> None:
        """Processors first (they register and wait), then the coordinator: one first model."""
        members: list[list[tuple[str, str, str]]] = [[] for _ in range(self.workers)]
        for i in range(self.size):
            pid = f"processor-{i:03d}"
            members[i % self.workers].append((pid, f"zone-{i % 3}/host-{i:03d}", f"host-{i:03d}"))
            self.home[pid] = i % self.workers
            self.alive.add(pid)
        context = multiprocessing.get_context("spawn")
        for index, group in enumerate(members):
            parent, child = context.Pipe()
            process = context.Process(
                target=worker_main,
                args=(
                    child,
                    self.hosts,
                    self.config.job_folder,
                    self.config.job.run_id,
                    self.config.job.name,
                    group,
                ),
                name=f"processors-{index}",
                daemon=True,
            )
            process.start()
            self.pipes.append(parent)
            self.processes.append(process)
        for index, pipe in enumerate(self.pipes):
            if not pipe.poll(120) or pipe.recv() != "ready":
                raise TimeoutError(f"worker {index} did not start")
        wait(
            lambda: len(self.view.processors.locality()) == self.size,
            120,
            "every processor to register",
            0.2,
        )
        self.coordinator_client = connect(self.hosts, session_timeout_s=SESSION_TIMEOUT_S)
        self.coordinator = CoordinatorService(
            self.config, self.coordinator_client, self.store(self.coordinator_client)
        )
        self.coordinator_thread = threading.Thread(
            target=self.coordinator.run, args=(self.coordinator_stop,), daemon=True
        )
        self.coordinator_thread.start()
        self.wait_settled()

    def stop(self) -> None:
        self.coordinator_stop.set()
        if self.coordinator_thread is not None:
            self.coordinator_thread.join(30)
        if self.coordinator_client is not None:
            self.coordinator_client.stop()
            self.coordinator_client.close()
        for index in range(len(self.pipes)):
            self.ask(index, "stop")
        for process in self.processes:
            process.join(30)
        self.observer.stop()
        self.observer.close()

    # ------------------------------------------------------------------ observing

    def live(self) -> list[str]:
        return sorted(self.alive)

    def status(self) -> dict[str, tuple[int | None, int, int]]:
        merged: dict[str, tuple[int | None, int, int]] = {}
        for index in range(len(self.pipes)):
            merged.update(self.ask(index, "status"))
        return merged

    def settled_on(self) -> int | None:
        """The version every live processor runs, once it is DONE and names exactly them."""
        version = self.view.job_models.latest_version()
        if version is None or self.view.barriers.state(version) != BarrierState.DONE:
            return None
        if any(running != version for running, _, _ in self.status().values()):
            return None
        return version

    def wait_settled(self) -> int:
        wait(lambda: self.settled_on() is not None, SETTLE_TIMEOUT_S, "the job to settle", 0.05)
        model = self.view.job_models.read_latest()
        assert model is not None
        if set(model.containers) != self.alive:
            raise AssertionError(f"v{model.version} names {len(model.containers)} processors")
        # The survivors write their task locality just after starting: let it finish.
        self.wait_quiet()
        return model.version

    def counters(self) -> tuple[int, int, int, int]:
        assert self.coordinator is not None
        coordinator = self.coordinator.store
        status = self.status()
        return (
            coordinator.ops,
            coordinator.reads,
            sum(writes for _, writes, _ in status.values()),
            sum(reads for _, _, reads in status.values()),
        )

    def wait_quiet(self, quiet_s: float = 0.5) -> None:
        """Until no store counter has moved for ``quiet_s``."""
        last = self.counters()
        since = time.monotonic()
        while time.monotonic() - since < quiet_s:
            time.sleep(0.05)
            now = self.counters()
            if now != last:
                last, since = now, time.monotonic()

    # ------------------------------------------------------------------ one death

    def kill(self, victim: str) -> Death:
        before_version = self.view.job_models.latest_version()
        assert before_version is not None
        before_model = self.view.job_models.read(before_version)
        registrations, _ = self.view.processors.read()
        (node,) = [r.node for r in registrations if r.processor_id == victim]
        self.alive.discard(victim)
        before = self.counters()  # survivors only
        target = before_version + 1
        seen: dict[str, float] = {}
        done = threading.Event()

        def on_version(data: bytes | None, stat: ZnodeStat | None) -> bool:
            if data and int(data) >= target and "published" not in seen:
                seen["published"] = time.perf_counter()
            return "published" not in seen

        def on_state(data: bytes | None, stat: ZnodeStat | None) -> bool:
            if data is not None and data != BarrierState.NEW.encode() and "done" not in seen:
                seen["done"] = time.perf_counter()
                seen["state"] = 1.0 if data == BarrierState.DONE.encode() else 0.0
                done.set()
            return not done.is_set()

        layout = self.view.layout
        DataWatch(self.observer, layout.job_model_version, on_version)
        DataWatch(self.observer, layout.barrier_state(target), on_state)

        def poll_gone() -> None:
            while self.observer.exists(node) is not None:
                time.sleep(0.001)
            seen["gone"] = time.perf_counter()

        poller = threading.Thread(target=poll_gone, name="poll-gone", daemon=True)
        poller.start()
        cpu_before = self.cpu()
        # The session closes: the registration vanishes, no unregister.
        self.ask(self.home[victim], "kill", victim)
        poller.join(30)
        if not done.wait(120):
            raise TimeoutError(f"barrier {target} not decided within 120 s")
        cpu_used = [after - before for after, before in zip(self.cpu(), cpu_before, strict=True)]
        if seen["state"] != 1.0:
            raise AssertionError(f"barrier {target} was not DONE")
        # ZooKeeper's own clock (ms): publish (jobModelVersion set), each join, DONE.
        published_ms = self.observer.get(layout.job_model_version)[1].mtime
        done_ms = self.observer.get(layout.barrier_state(target))[1].mtime
        folder = layout.barrier_participants(target)
        joins = sorted(
            self.observer.get(f"{folder}/{name}")[1].ctime
            for name in self.observer.get_children(folder)
        )
        self.wait_settled()
        after = self.counters()
        model = self.view.job_models.read(target)
        if victim in model.containers:
            raise AssertionError(f"v{target} still names the dead {victim}")
        owner_before, owner_after = before_model.task_to_processor(), model.task_to_processor()
        return Death(
            gone_to_published=seen["published"] - seen["gone"],
            published_to_done=seen["done"] - seen["published"],
            gone_to_done=seen["done"] - seen["gone"],
            coordinator_writes=after[0] - before[0],
            coordinator_reads=after[1] - before[1],
            processor_writes=after[2] - before[2],
            processor_reads=after[3] - before[3],
            moved=tasks_moved(owner_before, owner_after),
            cpu_processors=cpu_used[0],
            cpu_coordinator=cpu_used[1],
            cpu_zookeeper=cpu_used[2],
            first_join=(joins[0] - published_ms) / 1000,
            last_join=(joins[-1] - published_ms) / 1000,
            last_join_to_done=(done_ms - joins[-1]) / 1000,
        )


def bench(
    server: ZooKeeperServer,
    processors: int,
    tasks: int,
    deaths: int,
    debounce_ms: int,
    seed: int,
    workers: int,
) -> Row:
    row = Row(processors, tasks, debounce_ms / 1000)
    job = Job(server, processors, tasks, debounce_ms, workers)
    rng = random.Random(seed)
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
                f" ms after the last), {death.moved} tasks moved",
                flush=True,
            )
        version = job.view.job_models.latest_version()
        assert version is not None
        row.decode_s, _ = median_time(lambda: job.view.job_models.read(version), 3)
        pid = job.live()[0]
        row.view_s, _ = median_time(lambda: job.view.job_models.read_container(version, pid), 5)
    finally:
        job.stop()
    return row


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def report(rows: list[Row], deaths: int, seconds: float, workers: int) -> str:
    body = table(
        [
            "P",
            "T",
            "deaths",
            "debounce",
            "death -> DONE",
            "beyond debounce",
            "death -> published",
            "published -> DONE",
            "joins after publish",
            "one view read",
            "whole model read",
            "CPU to DONE: processors / coordinator / ZooKeeper",
            "moved",
            "coordinator writes / reads",
            "processors writes / reads",
        ],
        [
            [
                r.processors,
                f"{r.tasks:,}",
                len(r.deaths),
                ms(r.debounce_s),
                ms(r.median(lambda d: d.gone_to_done)),
                ms(r.median(lambda d: d.gone_to_done) - r.debounce_s),
                ms(r.median(lambda d: d.gone_to_published)),
                ms(r.median(lambda d: d.published_to_done)),
                f"+{r.median(lambda d: d.first_join) * 1000:,.0f} .. "
                f"+{r.median(lambda d: d.last_join) * 1000:,.0f} ms",
                ms(r.view_s),
                ms(r.decode_s),
                f"{r.median(lambda d: d.cpu_processors) * 1000:,.0f} / "
                f"{r.median(lambda d: d.cpu_coordinator) * 1000:,.0f} / "
                f"{r.median(lambda d: d.cpu_zookeeper) * 1000:,.0f} ms",
                f"{r.median(lambda d: d.moved):,.0f}",
                f"{r.median(lambda d: d.coordinator_writes):,.0f} / "
                f"{r.median(lambda d: d.coordinator_reads):,.0f}",
                f"{r.median(lambda d: d.processor_writes):,.0f} / "
                f"{r.median(lambda d: d.processor_reads):,.0f}",
            ]
            for r in rows
        ],
    )
    return (
        "## Rebalance after a processor's death (`benchmarks/rebalance.py`)\n\n"
        f"A private ZooKeeper (Debian package) on loopback; {machine()}; total run "
        f"{seconds:.0f} s. One real coordinator (election, fenced publishes, `host-affinity`) "
        "in this process, and P processor clients, each with its own ZooKeeper session and "
        f"thread, spread over {workers} worker processes (as on separate hosts, but all on "
        "this machine's cores, with ZooKeeper); one location per processor. A death closes a "
        "processor's session without unregistering; times run from the moment its "
        "registration node is gone. Medians over "
        f"{deaths} deaths per size (P shrinks by one per death).\n\n"
        "- **death -> DONE**: until barrier v+1 is DONE; **beyond debounce**: the same minus "
        "the debounce (target: at most 500 ms).\n"
        "- **death -> published**: the coordinator's part (debounce, read the processors, run "
        "the grouper, publish v+1 in one fenced transaction).\n"
        "- **published -> DONE**: every survivor reads its own container of v+1 (the "
        "manifest and one container view: **one view read**), stops what it loses, joins the "
        "barrier and watches the barrier's state; the leader marks it DONE when all have "
        "joined. **whole model read**: reading and decoding the whole T-task model once, for "
        "comparison (what each survivor did before container views). **joins after publish**: "
        "the first and the last survivor's barrier join, by ZooKeeper's clock.\n"
        "- **CPU to DONE**: CPU time used from the death to DONE by the worker processes (all "
        "survivors), this process (the coordinator and the observer) and the ZooKeeper server; "
        "their sum over the number of cores bounds how fast this machine can be.\n"
        "- **moved**: tasks whose processor changed (the dead processor's tasks).\n"
        "- **writes / reads**: ZooKeeper operations of one rebalance counted by the stores "
        "(`ZkMetadataStore.ops` and `.reads`; a read is one node read; kazoo's watch recipes' "
        "own re-reads are not counted): the coordinator's store, and the sum over the "
        "survivors' stores (barrier joins, container-view reads, and the task locality each "
        "survivor rewrites after DONE: the store reads every entry of the survivor's tasks and "
        "writes the ones that changed, the moved tasks).\n\n"
        f"{body}\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    parser.add_argument("--sizes", default=None, help="P:T pairs, e.g. 100:10000,50:10000")
    parser.add_argument(
        "--workers", type=int, default=4, help="processes hosting the processors (4)"
    )
    parser.add_argument("--deaths", type=int, default=None, help="deaths per size (5; quick 2)")
    parser.add_argument("--debounce-ms", type=int, default=None, help="1000 (quick: 200)")
    parser.add_argument("--seed", type=int, default=7, help="which processors die")
    parser.add_argument("--doc", type=Path, default=DOC, help="Markdown file to write")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    _quiet()
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
        server = ZooKeeperServer(Path(workdir), heap_mb=1024)
        server.start()
        try:
            for processors, tasks in sizes:
                print(f"P={processors}, T={tasks:,}, debounce {debounce_ms} ms ...", flush=True)
                rows.append(
                    bench(server, processors, tasks, deaths, debounce_ms, args.seed, args.workers)
                )
        finally:
            server.stop()
    markdown = report(rows, deaths, time.perf_counter() - started, args.workers)
    print()
    print(markdown)
    if not args.no_write:
        write_section("rebalance", markdown, doc=args.doc)
        print(f"wrote section 'rebalance' of {args.doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
