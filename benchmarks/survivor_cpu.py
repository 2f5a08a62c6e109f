"""A survivor's CPU per rebalance, measured alone: the yardstick for issue 16 item 2 (<= 2 ms).

A *survivor* is a processor that neither loses nor gains a task when another processor dies: it
reads the new version's manifest, sees it is in neither ``losing`` nor ``gaining``, joins the
barrier, waits for DONE and starts nothing new.

On a private ZooKeeper server (:class:`coordinator.launchers.zookeeper.EmbeddedZooKeeper`), this
process plays the leader for a job of P processors and T tasks (``--size P:T``): it publishes
job model v+1 (one task moved between two of the processors that are not measured, as after a
death: ``base`` v, ``losing`` and ``gaining`` one each), waits for the survivors to join barrier
v+1 and marks it DONE. The survivors (``--survivors K`` real
:class:`~coordinator.member.processor.ProcessorClient` instances, each with its own session) run
in a child process that does nothing else, so the child's CPU time (``time.process_time``: every
thread, kazoo's included, but for its main thread, which only answers this process) over one
rebalance, over K, is one survivor's CPU per rebalance.
Wall time is not measured: the machine may be loaded. The CPU of one plain ``get`` round trip
(``benchmarks/_reference.py``), measured before and after, gives the median in round trips too.

Usage: ``python benchmarks/survivor_cpu.py [--size 1000:10000] [--survivors 1] [--rounds 20]
[--profile] [--top 30]``. ``--profile`` runs cProfile in every thread of the child and prints
the functions that cost the most (the profile slows everything; its numbers are relative).
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_ROOT = _HERE.parent
# benchmarks/groupers.py would shadow the groupers package the coordinator imports.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_ROOT))

import argparse  # noqa: E402
import cProfile  # noqa: E402
import io  # noqa: E402
import multiprocessing  # noqa: E402
import pstats  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Mapping  # noqa: E402
from multiprocessing.connection import Connection  # noqa: E402
from typing import Any  # noqa: E402

from benchmarks._rebalance_workers import count_requests, quiet, requests_of  # noqa: E402
from benchmarks._reference import get_round_trip_cpu  # noqa: E402
from coordinator.launchers.zookeeper import EmbeddedZooKeeper  # noqa: E402
from coordinator.member.processor import ProcessorClient  # noqa: E402
from metadata.model import (  # noqa: E402
    BarrierState,
    ContainerModel,
    JobModel,
    SystemStreamPartition,
    TaskModel,
)
from metadata.zk import ZkMetadataStore, connect  # noqa: E402
from metadata.zk.connection import DirectClient  # noqa: E402
from metadata.zk.recipe.epoch import LeaderEpoch  # noqa: E402

JOB = "/affinity/survivor-bench"
RUN_ID = "r1"
SESSION_S = 30.0
SETTLE_S = 0.05  # after the last survivor runs v: let trailing callbacks finish


# ---------------------------------------------------------------------------- the survivors


class _Profiles:
    """cProfile in every thread started from now on (and this one)."""

    def __init__(self) -> None:
        self.profiles: list[cProfile.Profile] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        self._enable()
        threading.setprofile(self._hook)

    def _hook(self, *_args: Any) -> None:
        self._enable()

    def _enable(self) -> None:
        profile = cProfile.Profile(time.thread_time)  # CPU, not waits
        with self._lock:
            self.profiles.append(profile)
        profile.enable()

    def report(self, top: int) -> str:
        holders = []
        for profile in self.profiles:
            profile.snapshot_stats()
            holder = type("H", (), {"create_stats": lambda self: None, "stats": profile.stats})()
            holders.append(holder)
        out = io.StringIO()
        stats = pstats.Stats(*holders, stream=out)
        stats.sort_stats("tottime").print_stats(top)
        stats.sort_stats("cumulative").print_stats(top)
        return out.getvalue()


def _count_kinds() -> Counter[str]:
    """From now on, count the requests of every client of this process by kind (clients made by
    ``metadata.zk.connect``: :class:`~metadata.zk.connection.DirectClient`)."""
    kinds: Counter[str] = Counter()
    original = DirectClient._call

    def counted(self: Any, request: Any, async_object: Any) -> Any:
        kinds[type(request).__name__] += 1
        return original(self, request, async_object)

    DirectClient._call = counted
    return kinds


def _survivors_main(conn: Connection, hosts: str, ids: list[str], top: int) -> None:
    """The survivors' process (``top`` > 0: profile, and list that many functions)."""
    quiet()
    count_requests()
    kinds = _count_kinds()
    profiles = _Profiles()
    if top:
        profiles.start()
    send_lock = threading.Lock()

    def send(message: Any) -> None:
        with send_lock:
            conn.send(message)

    stop = threading.Event()
    agents = []
    for pid in ids:
        client = connect(hosts, session_timeout_s=SESSION_S, connect_timeout_s=60)
        store = ZkMetadataStore(client, JOB, run_id=RUN_ID, retry_deadline_s=60)
        agent = ProcessorClient(
            client, store, pid, f"loc/{pid}", on_start=_ignore, on_stop=_ignore, host=pid
        )
        _report_running(agent, send)
        thread = threading.Thread(target=agent.run, args=(stop,), name=pid, daemon=True)
        thread.start()
        agents.append((client, thread))
    while True:
        command = conn.recv()
        if command == "cpu":
            # (not this thread's: it only answers the parent)
            cpu = time.process_time() - time.thread_time()
            send(("cpu", cpu, sum(requests_of(c) for c, _ in agents)))
        elif command == "threads":
            send(("threads", _thread_cpu()))
        elif command == "stop":
            stop.set()
            for client, thread in agents:
                thread.join(10)
                client.stop()
                client.close()
            send(("stopped", profiles.report(top) if top else "", dict(kinds)))
            return


def _thread_cpu() -> dict[str, float]:
    """CPU seconds so far of each live thread of this process, by kind of thread."""
    kinds: dict[str, float] = {}
    for thread in threading.enumerate():
        if thread.ident is None:
            continue
        try:
            seconds = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except OSError:  # (ended meanwhile)
            continue
        target = repr(getattr(thread, "_target", ""))
        name = "member group" if thread.name[:2] == "p-" else thread.name.split("-")[0]
        if "zk_loop" in target or "_connect" in target:
            name = "kazoo connection"
        elif "_thread_worker" in target:
            name = "kazoo callbacks"
        elif thread is threading.main_thread():
            name = "harness (not counted)"
        kinds[name] = kinds.get(name, 0.0) + seconds
    return kinds


def _ignore(_version: int | None, _tasks: Mapping[str, TaskModel]) -> None:
    return None


def _report_running(agent: ProcessorClient, send: Any) -> None:
    """Tell the parent ``("running", pid, v)`` each time the member starts running version v
    (a survivor starts no task, but its machine still says StartTasks)."""
    group = agent.group
    original = group._start_tasks

    def start_tasks(member: Any, action: Any) -> Any:
        result = original(member, action)
        send(("running", member.machine.processor_id, action.version))
        return result

    group._start_tasks = start_tasks  # type: ignore[method-assign]


# ---------------------------------------------------------------------------- the leader


def _model(version: int, owner: dict[str, str], tasks: dict[str, TaskModel]) -> JobModel:
    by_processor: dict[str, dict[str, TaskModel]] = {}
    for name, pid in owner.items():
        by_processor.setdefault(pid, {})[name] = tasks[name]
    containers = {
        pid: ContainerModel(pid, f"loc/{pid}", mine) for pid, mine in sorted(by_processor.items())
    }
    return JobModel(version, containers, {})


class _Leader:
    def __init__(self, store: ZkMetadataStore, epoch: LeaderEpoch, survivors: list[str]) -> None:
        self.store = store
        self.epoch = epoch
        self.survivors = survivors

    def publish(self, model: JobModel, **kwargs: Any) -> None:
        self.store.job_models.publish(
            model, epoch=self.epoch, participants=self.survivors, **kwargs
        )

    def decide(self, version: int, conn: Connection) -> None:
        """Wait for every survivor to join ``version``, mark it DONE, wait until they run it."""
        deadline = time.monotonic() + 120
        while not set(self.survivors) <= self.store.barriers.participants(version):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the survivors did not join barrier {version}")
            time.sleep(0.002)
        self.store.barriers.set_state(version, BarrierState.DONE, epoch=self.epoch)
        waiting = set(self.survivors)
        while waiting:
            if not conn.poll(120):
                raise TimeoutError(f"the survivors did not start version {version}")
            message = conn.recv()
            if message[0] == "running" and message[2] == version:
                waiting.discard(message[1])
        time.sleep(SETTLE_S)


def _cpu(conn: Connection) -> tuple[float, int]:
    conn.send("cpu")
    while True:
        message = conn.recv()
        if message[0] == "cpu":
            return message[1], message[2]


def _threads(conn: Connection) -> dict[str, float]:
    conn.send("threads")
    while True:
        message = conn.recv()
        if message[0] == "threads":
            return dict(message[1])


def measure(hosts: str, processors: int, tasks: int, k: int, rounds: int, top: int) -> None:
    """Publish ``rounds`` versions; print the survivors' CPU (and profile if ``top``)."""
    ids = [f"p-{i:04d}" for i in range(processors)]
    survivors, others = ids[:k], ids[k:]
    catalogue = {
        f"Partition {i}": TaskModel(
            f"Partition {i}", frozenset({SystemStreamPartition("kafka", "events", i)}), i
        )
        for i in range(tasks)
    }
    owner = {name: ids[i % processors] for i, name in enumerate(catalogue)}
    reference_before = get_round_trip_cpu(hosts)
    client = connect(hosts, session_timeout_s=SESSION_S)
    store = ZkMetadataStore(client, JOB, run_id=RUN_ID)
    store.ensure_layout()
    leader = _Leader(store, store.epochs.acquire(), survivors)
    parent, child = multiprocessing.get_context("spawn").Pipe()
    worker = multiprocessing.get_context("spawn").Process(
        target=_survivors_main, args=(child, hosts, survivors, top), daemon=True
    )
    worker.start()
    leader.publish(_model(1, owner, catalogue))
    leader.decide(1, parent)
    rng = random.Random(7)
    threads_before = _threads(parent)
    costs, requests = [], []
    for version in range(2, rounds + 2):
        cpu0, req0 = _cpu(parent)
        loser, gainer = rng.sample(others, 2)
        moved = next(name for name, pid in owner.items() if pid == loser)
        owner[moved] = gainer
        leader.publish(
            _model(version, owner, catalogue), base=version - 1, losing=[loser], gaining=[gainer]
        )
        leader.decide(version, parent)
        cpu1, req1 = _cpu(parent)
        costs.append((cpu1 - cpu0) / k * 1000)
        requests.append((req1 - req0) / k)
    threads_after = _threads(parent)
    per_thread = {
        kind: (seconds - threads_before.get(kind, 0.0)) / rounds / k * 1000
        for kind, seconds in threads_after.items()
    }
    parent.send("stop")
    while (message := parent.recv())[0] != "stopped":
        pass
    worker.join(30)
    client.stop()
    client.close()
    reference = (reference_before, get_round_trip_cpu(hosts))
    _print(processors, tasks, k, costs, requests, reference, bool(top))
    shares = ", ".join(f"{kind} {ms:.2f}" for kind, ms in sorted(per_thread.items()))
    print(f"mean CPU per survivor and rebalance by thread (ms): {shares}")
    kinds = ", ".join(f"{kind} {n / k / (rounds + 1):.1f}" for kind, n in message[2].items())
    print(f"requests by kind, per survivor and version (setup included): {kinds}")
    if top:
        print(message[1])


def _print(
    processors: int,
    tasks: int,
    k: int,
    costs: list[float],
    reqs: list[float],
    reference: tuple[float, float],
    profile: bool,
) -> None:
    """The table; ``reference``: a plain get round trip's CPU before and after (seconds)."""
    note = " (profiled: relative only)" if profile else ""
    print(f"\nP={processors} T={tasks:,} survivors measured={k} rounds={len(costs)}{note}")
    print("| survivor CPU per rebalance | ms |")
    print("|---|---|")
    print(f"| median | {statistics.median(costs):.2f} |")
    print(f"| mean | {statistics.fmean(costs):.2f} |")
    print(f"| min | {min(costs):.2f} |")
    print(f"| max | {max(costs):.2f} |")
    print(f"| ZooKeeper requests per rebalance | {statistics.median(reqs):.1f} |")
    before, after = (seconds * 1e6 for seconds in reference)
    gets = statistics.median(costs) * 1000 / ((before + after) / 2)
    print(f"| median in get round trips (a get: {before:.0f} / {after:.0f} us) | {gets:.1f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1000:10000", help="P:T of the job (default 1000:10000)")
    parser.add_argument("--survivors", type=int, default=1, help="survivors measured (default 1)")
    parser.add_argument("--rounds", type=int, default=20, help="rebalances (default 20)")
    parser.add_argument("--profile", action="store_true", help="cProfile the survivors' threads")
    parser.add_argument("--top", type=int, default=30, help="functions the profile lists")
    args = parser.parse_args(argv)
    processors, tasks = (int(x) for x in args.size.split(":"))
    if not 1 <= args.survivors < processors - 1:
        parser.error("--survivors must be at least 1 and leave two other processors")
    quiet()
    with tempfile.TemporaryDirectory(prefix="survivor-cpu-") as workdir:
        server = EmbeddedZooKeeper(Path(workdir))
        server.start()
        try:
            measure(
                server.hosts,
                processors,
                tasks,
                args.survivors,
                args.rounds,
                args.top if args.profile else 0,
            )
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
