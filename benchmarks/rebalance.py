"""Rebalance latency (a processor's death to barrier DONE) and ZooKeeper operations per rebalance.

For P = 10, 50 and 100 processors and T = 10,000 tasks, on a private ZooKeeper server (Debian's
package, ``tests/zkserver.py``) on loopback, in one Python process:

- one :class:`coordinator.service.CoordinatorService` (the real leader: election, epoch, watches,
  the ``host-affinity`` grouper, fenced publishes) with its own KazooClient;
- P :class:`coordinator.processor.ProcessorClient` instances, each with its own KazooClient (a
  real session) and its own thread, one location per processor (``zone-<i % 3>/host-<i>``).

A *death* is a processor's session closed without unregistering (``client.stop()``): ZooKeeper
deletes its ephemeral registration at once. An observer (a separate client) polls that node and
times from the moment it is gone to the moment barrier v+1 reads ``DONE`` (a DataWatch), and
also the moment ``jobModelVersion`` says v+1 (published). After each death the benchmark waits
until every survivor runs v+1 and has written its task locality, and counts the ZooKeeper
operations of the rebalance with the stores' counters (``ZkMetadataStore.ops`` = writes,
``reads``): the coordinator's store, and the sum over the survivors' stores. Reads made by
kazoo's watch recipes themselves (re-reading a watched node) are not counted.

The table gives the median over several deaths per size, the debounce used, and the overhead
beyond it. All processors share one interpreter here: after a publish, every survivor decodes
the new job model (T tasks) before joining the barrier, and those decodes run one after the
other on one GIL. The "published -> DONE" column is therefore about P times one decode, where
processors on separate hosts decode in parallel; the "one decode" column gives that time.

So each size runs twice: as described (the first table: latency and operations), and once more
with the processors' decodes shared (the second table, latency only): the in-process processors
read a version through one cache, so one decode per version is on the critical path, as it is
when each processor decodes on its own host at the same time. Everything else (the sessions,
the registrations, the coordinator, the barrier joins and watches, ZooKeeper) is the same.

Usage: ``python benchmarks/rebalance.py [--quick] [--deaths N] [--debounce-ms MS] [--doc PATH]
[--no-write]``.
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
import functools  # noqa: E402
import logging  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Mapping  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402

import structlog  # noqa: E402
from kazoo.client import KazooClient  # noqa: E402
from kazoo.protocol.states import ZnodeStat  # noqa: E402
from kazoo.recipe.watchers import DataWatch  # noqa: E402
from zkserver import ZooKeeperServer  # noqa: E402

from benchmarks._report import DOC, machine, median_time, table, write_section  # noqa: E402
from coordinator.config import JobConfig, load_config  # noqa: E402
from coordinator.processor import ProcessorClient  # noqa: E402
from coordinator.service import CoordinatorService  # noqa: E402
from metadata.model import JobModel, TaskModel  # noqa: E402
from metadata.zk import ZkMetadataStore, connect  # noqa: E402

FULL = ((10, 10_000), (50, 10_000), (100, 10_000))
QUICK = ((5, 1_000), (10, 1_000))
SESSION_TIMEOUT_S = 30.0
SETTLE_TIMEOUT_S = 600.0


@dataclass
class Processor:
    pid: str
    client: KazooClient
    store: ZkMetadataStore
    agent: ProcessorClient
    stop: threading.Event
    thread: threading.Thread
    alive: bool = True


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


@dataclass
class Row:
    processors: int
    tasks: int
    debounce_s: float
    shared_decode: bool = False
    deaths: list[Death] = field(default_factory=list)
    decode_s: float = 0.0

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


class SharedDecode:
    """One decode per job-model version for every processor store of this process (the
    emulation of processors decoding in parallel on their own hosts)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._models: dict[tuple[str, int], JobModel] = {}

    def read(
        self, store: ZkMetadataStore, read: Callable[[int], JobModel], version: int
    ) -> JobModel:
        with self._lock:  # the others wait for the first decode, as if it ran in parallel
            key = (store.job_folder, version)
            if key not in self._models:
                self._models[key] = read(version)
            return self._models[key]

    def install(self, store: ZkMetadataStore) -> None:
        store.read_job_model = functools.partial(  # type: ignore[method-assign]
            self.read, store, store.read_job_model
        )


class Job:
    """One job: a coordinator and P processors in this process, on their own job folder."""

    def __init__(
        self,
        server: ZooKeeperServer,
        processors: int,
        tasks: int,
        debounce_ms: int,
        shared: SharedDecode | None = None,
    ) -> None:
        name = f"p{processors}-t{tasks}" + ("-shared" if shared else "")
        self.config = job_config(server.hosts, name, tasks, debounce_ms)
        self.hosts = server.hosts
        self.size = processors
        self.shared = shared
        self.processors: list[Processor] = []
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

    # ------------------------------------------------------------------ life cycle

    def start(self) -> None:
        """Processors first (they register and wait), then the coordinator: one first model."""
        for i in range(self.size):
            pid = f"processor-{i:03d}"
            client = connect(self.hosts, session_timeout_s=SESSION_TIMEOUT_S)
            store = self.store(client)
            if self.shared is not None:
                self.shared.install(store)
            agent = ProcessorClient(
                client,
                store,
                pid,
                f"zone-{i % 3}/host-{i:03d}",
                on_start=_ignore,
                on_stop=_ignore,
                host=f"host-{i:03d}",
                job=self.config.job.name,
            )
            stop = threading.Event()
            thread = threading.Thread(target=agent.run, args=(stop,), name=pid, daemon=True)
            thread.start()
            self.processors.append(Processor(pid, client, store, agent, stop, thread))
        wait(
            lambda: len(self.view.read_processor_locality()) == self.size,
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
        for processor in self.processors:
            processor.stop.set()
        for processor in self.processors:
            processor.thread.join(30)
            if processor.alive:
                processor.client.stop()
            processor.client.close()
        self.observer.stop()
        self.observer.close()

    # ------------------------------------------------------------------ observing

    def live(self) -> list[Processor]:
        return [p for p in self.processors if p.alive]

    def settled_on(self) -> int | None:
        """The version every live processor runs, once it is DONE and names exactly them."""
        version = self.view.read_latest_version()
        if version is None or self.view.barrier_state(version) != "DONE":
            return None
        if any(p.agent.running_version != version for p in self.live()):
            return None
        return version

    def wait_settled(self) -> int:
        wait(lambda: self.settled_on() is not None, SETTLE_TIMEOUT_S, "the job to settle", 0.05)
        model = self.view.read_latest_job_model()
        assert model is not None
        expected = {p.pid for p in self.live()}
        if set(model.containers) != expected:
            raise AssertionError(f"v{model.version} names {len(model.containers)} processors")
        # The survivors write their task locality just after starting: let it finish.
        self.wait_quiet()
        return model.version

    def counters(self) -> tuple[int, int, int, int]:
        assert self.coordinator is not None
        coordinator = self.coordinator.store
        live = self.live()
        return (
            coordinator.ops,
            coordinator.reads,
            sum(p.store.ops for p in live),
            sum(p.store.reads for p in live),
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

    def kill(self, victim: Processor) -> Death:
        before_version = self.view.read_latest_version()
        assert before_version is not None
        before_model = self.view.read_job_model(before_version)
        registrations, _ = self.view.read_processors()
        (node,) = [r.node for r in registrations if r.processor_id == victim.pid]
        victim.alive = False
        before = self.counters()  # survivors only
        target = before_version + 1
        seen: dict[str, float] = {}
        done = threading.Event()

        def on_version(data: bytes | None, stat: ZnodeStat | None) -> bool:
            if data and int(data) >= target and "published" not in seen:
                seen["published"] = time.perf_counter()
            return "published" not in seen

        def on_state(data: bytes | None, stat: ZnodeStat | None) -> bool:
            if data is not None and data != b"NEW" and "done" not in seen:
                seen["done"] = time.perf_counter()
                seen["state"] = 1.0 if data == b"DONE" else 0.0
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
        victim.client.stop()  # the session closes: the registration vanishes, no unregister
        poller.join(30)
        if not done.wait(120):
            raise TimeoutError(f"barrier {target} not decided within 120 s")
        if seen["state"] != 1.0:
            raise AssertionError(f"barrier {target} was not DONE")
        self.wait_settled()
        after = self.counters()
        model = self.view.read_job_model(target)
        if victim.pid in model.containers:
            raise AssertionError(f"v{target} still names the dead {victim.pid}")
        owner_before, owner_after = before_model.task_to_processor(), model.task_to_processor()
        return Death(
            gone_to_published=seen["published"] - seen["gone"],
            published_to_done=seen["done"] - seen["published"],
            gone_to_done=seen["done"] - seen["gone"],
            coordinator_writes=after[0] - before[0],
            coordinator_reads=after[1] - before[1],
            processor_writes=after[2] - before[2],
            processor_reads=after[3] - before[3],
            moved=sum(1 for t, p in owner_after.items() if owner_before.get(t) != p),
        )


def bench(
    server: ZooKeeperServer,
    processors: int,
    tasks: int,
    deaths: int,
    debounce_ms: int,
    seed: int,
    *,
    shared_decode: bool = False,
) -> Row:
    row = Row(processors, tasks, debounce_ms / 1000, shared_decode)
    job = Job(server, processors, tasks, debounce_ms, SharedDecode() if shared_decode else None)
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
                f"  death {n + 1}/{deaths} ({victim.pid}): DONE {death.gone_to_done * 1000:.0f} ms"
                f" after the node vanished (published after "
                f"{death.gone_to_published * 1000:.0f} ms), {death.moved} tasks moved",
                flush=True,
            )
        version = job.view.read_latest_version()
        assert version is not None
        row.decode_s, _ = median_time(lambda: job.view.read_job_model(version), 3)
    finally:
        job.stop()
    return row


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def report(rows: list[Row], deaths: int, seconds: float) -> str:
    shared = [r for r in rows if r.shared_decode]
    rows = [r for r in rows if not r.shared_decode]
    emulated = table(
        [
            "P",
            "T",
            "deaths",
            "debounce",
            "death -> DONE",
            "beyond debounce",
            "death -> published",
            "published -> DONE",
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
            ]
            for r in shared
        ],
    )
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
            "one decode",
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
                ms(r.decode_s),
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
        "and P processor clients, each with its own ZooKeeper session, all in one Python "
        "process; one location per processor. A death closes a processor's session without "
        "unregistering; times run from the moment its registration node is gone. Medians over "
        f"{deaths} deaths per size (P shrinks by one per death).\n\n"
        "- **death -> DONE**: until barrier v+1 is DONE; **beyond debounce**: the same minus "
        "the debounce (target: at most 500 ms).\n"
        "- **death -> published**: the coordinator's part (debounce, read the processors, run "
        "the grouper, publish v+1 in one fenced transaction).\n"
        "- **published -> DONE**: every survivor reads v+1, stops what it loses, joins the "
        "barrier; the leader marks it DONE. Here the survivors' P-1 model decodes share one "
        "interpreter (one GIL) and run one after the other, so this is about P x **one "
        "decode** (reading and decoding the T-task job model once, idle); processors on "
        "separate hosts decode in parallel, so there it is about one decode plus a few round "
        "trips.\n"
        "- **moved**: tasks whose processor changed (the dead processor's tasks).\n"
        "- **writes / reads**: ZooKeeper operations of one rebalance counted by the stores "
        "(`ZkMetadataStore.ops` and `.reads`; a read is one node read; kazoo's watch recipes' "
        "own re-reads are not counted): the coordinator's store, and the sum over the "
        "survivors' stores (barrier joins, job-model reads, and the task locality each "
        "survivor rewrites after DONE: the store reads every entry of the survivor's tasks and "
        "writes the ones that changed, the moved tasks).\n\n"
        f"{body}\n\n"
        "The same deaths with the processors' decodes shared (one decode of each version on the "
        "critical path, as when every processor decodes on its own host at the same time; "
        "latency only, the operation counts above are the real ones):\n\n"
        f"{emulated}\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    parser.add_argument("--deaths", type=int, default=None, help="deaths per size (5; quick 2)")
    parser.add_argument("--debounce-ms", type=int, default=None, help="1000 (quick: 200)")
    parser.add_argument("--seed", type=int, default=7, help="which processors die")
    parser.add_argument("--doc", type=Path, default=DOC, help="Markdown file to write")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    sizes = QUICK if args.quick else FULL
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
                rows.append(bench(server, processors, tasks, deaths, debounce_ms, args.seed))
            for processors, tasks in sizes:
                print(f"P={processors}, T={tasks:,}, decodes shared ...", flush=True)
                rows.append(
                    bench(
                        server,
                        processors,
                        tasks,
                        deaths,
                        debounce_ms,
                        args.seed,
                        shared_decode=True,
                    )
                )
        finally:
            server.stop()
    markdown = report(rows, deaths, time.perf_counter() - started)
    print()
    print(markdown)
    if not args.no_write:
        write_section("rebalance", markdown, doc=args.doc)
        print(f"wrote section 'rebalance' of {args.doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
