"""The job ``benchmarks/rebalance.py`` measures: a real coordinator in this process and P processor
clients in worker processes (``benchmarks/_rebalance_workers.py``) on one ZooKeeper server, an
observer timing each death from ZooKeeper's own clock. What one death and one size measured
(:class:`~benchmarks._rebalance_report.Death`, ``Row``) is in the report's module."""

from __future__ import annotations

import math
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from kazoo.client import KazooClient
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import DataWatch

from benchmarks._rebalance_report import Death
from benchmarks._rebalance_workers import cpu_seconds, requests_of, worker_main
from coordinator.config import JobConfig, load_config
from coordinator.launchers.zookeeper import EmbeddedZooKeeper as ZooKeeperServer
from coordinator.leader.service import CoordinatorService
from groupers.measures import tasks_moved
from metadata.model import BarrierState
from metadata.zk import ZkMetadataStore, connect

__all__ = ["PER_WORKER", "Job", "workers_for"]

#: Long sessions: on a loaded 2-core machine 1,000 sessions' pings can be late.
SESSION_TIMEOUT_S = 60.0
SETTLE_TIMEOUT_S = 600.0
#: Processors per worker process (at least 4 processes): the GIL of one process is shared by
#: all its processors' threads.
PER_WORKER = 50


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


def workers_for(processors: int, asked: int | None) -> int:
    return asked if asked else max(4, math.ceil(processors / PER_WORKER))


Status = dict[str, tuple[int | None, int, int, int]]


class Job:
    """One job: a coordinator (in this process) and P processors (in worker processes), on its
    own job folder."""

    def __init__(
        self, server: ZooKeeperServer, processors: int, tasks: int, debounce_ms: int, workers: int
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
        """CPU seconds so far: the worker processes, this process (coordinator and observer)
        with the grouper's worker process, the ZooKeeper server."""
        grouper = self.coordinator.grouper.pid if self.coordinator is not None else None
        return (
            sum(cpu_seconds(p.pid) for p in self.processes),
            cpu_seconds(os.getpid()) + cpu_seconds(grouper),
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
            pid = f"processor-{i:04d}"
            members[i % self.workers].append((pid, f"zone-{i % 3}/host-{i:04d}", f"host-{i:04d}"))
            self.home[pid] = i % self.workers
            self.alive.add(pid)
        context = multiprocessing.get_context("spawn")
        job = (self.config.job_folder, self.config.job.run_id, self.config.job.name)
        for index, group in enumerate(members):
            parent, child = context.Pipe()
            process = context.Process(
                target=worker_main,
                args=(child, self.hosts, job, group, SESSION_TIMEOUT_S),
                name=f"processors-{index}",
                daemon=True,
            )
            process.start()
            self.pipes.append(parent)
            self.processes.append(process)
        for index, pipe in enumerate(self.pipes):
            if not pipe.poll(300) or pipe.recv() != "ready":
                raise TimeoutError(f"worker {index} did not start")
        wait(
            lambda: len(self.view.processors.locality()) == self.size,
            300,
            "every processor to register",
            0.5,
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

    def status(self) -> Status:
        merged: Status = {}
        for index in range(len(self.pipes)):
            merged.update(self.ask(index, "status"))
        return merged

    def settled_on(self) -> int | None:
        """The version every live processor runs, once it is DONE and names exactly them."""
        version = self.view.job_models.latest_version()
        if version is None or self.view.barriers.state(version) != BarrierState.DONE:
            return None
        if any(status[0] != version for status in self.status().values()):
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

    def counters(self) -> tuple[int, int, int, int, int, int]:
        """Writes, reads and requests of the coordinator, then summed over the survivors."""
        assert self.coordinator is not None
        coordinator = self.coordinator.store
        status = [s for pid, s in self.status().items() if pid in self.alive]  # survivors
        return (
            coordinator.ops,
            coordinator.reads,
            requests_of(self.coordinator_client),
            sum(s[1] for s in status),
            sum(s[2] for s in status),
            sum(s[3] for s in status),
        )

    def wait_quiet(self, quiet_s: float = 0.5) -> None:
        """Until no counter has moved for ``quiet_s``."""
        last = self.counters()
        since = time.monotonic()
        while time.monotonic() - since < quiet_s:
            time.sleep(0.05)
            now = self.counters()
            if now != last:
                last, since = now, time.monotonic()

    def idle_rate(self, seconds: float = 1.0) -> float:
        """The worker processes' CPU per second while nothing happens: pings, and the
        benchmark's own status polls, made as often as while it waits for a rebalance."""
        before, started = self.cpu()[0], time.perf_counter()
        while time.perf_counter() - started < seconds:
            self.status()
            time.sleep(0.05)
        return (self.cpu()[0] - before) / (time.perf_counter() - started)

    # ------------------------------------------------------------------ one death

    def watch_moments(
        self, target: int, node: str
    ) -> tuple[dict[str, float], threading.Event, threading.Thread]:
        """Note when ``node`` is gone, version ``target`` published and its barrier decided."""
        seen: dict[str, float] = {}
        done = threading.Event()

        def on_version(data: bytes | None, stat: ZnodeStat | None) -> bool:
            if data and int(data) >= target and "published" not in seen:
                seen["published"] = time.perf_counter()
                seen["cpu_published"] = self.cpu()[1]  # the coordinator's side, so far
            return "published" not in seen

        def on_state(data: bytes | None, stat: ZnodeStat | None) -> bool:
            if data is not None and data != BarrierState.NEW.encode() and "done" not in seen:
                seen["done"] = time.perf_counter()
                seen["state"] = 1.0 if data == BarrierState.DONE.encode() else 0.0
                done.set()
            return not done.is_set()

        DataWatch(self.observer, self.view.layout.job_model_version, on_version)
        DataWatch(self.observer, self.view.layout.barrier_state(target), on_state)

        def poll_gone() -> None:
            while self.observer.exists(node) is not None:
                time.sleep(0.001)
            seen["gone"] = time.perf_counter()
            seen["gone_wall"] = time.time()  # beside ZooKeeper's clock: the same machine

        poller = threading.Thread(target=poll_gone, name="poll-gone", daemon=True)
        poller.start()
        return seen, done, poller

    def zk_moments(self, target: int) -> dict[str, float]:
        """By ZooKeeper's clock (UNIX seconds): the commit of version ``target`` (the version
        pointer's mtime), the first and last join of its barrier, and its decision. An observer's
        watch sees the commit late at large P (its event and read queue behind a thousand
        survivors'), so the times are taken from the nodes themselves."""
        layout = self.view.layout
        folder = layout.barrier_participants(target)
        joins = sorted(
            self.observer.get(f"{folder}/{name}")[1].ctime
            for name in self.observer.get_children(folder)
        )
        return {
            "published": self.observer.get(layout.job_model_version)[1].mtime / 1000,
            "done": self.observer.get(layout.barrier_state(target))[1].mtime / 1000,
            "first_join": joins[0] / 1000,
            "last_join": joins[-1] / 1000,
        }

    def leader_saw(self, target: int) -> tuple[float, float]:
        """From the leader's rebalance history of ``target``: its grouper run (seconds) and when
        its publish call returned (UNIX seconds)."""
        for entry in self.view.history.read(limit=5):
            if entry.version == target:
                return entry.phases.get("grouper") or 0.0, entry.published_at
        raise AssertionError(f"no rebalance history entry for version {target}")

    def kill(self, victim: str) -> Death:
        before_version = self.view.job_models.latest_version()
        assert before_version is not None
        before_model = self.view.job_models.read(before_version)
        registrations, _ = self.view.processors.read()
        (node,) = [r.node for r in registrations if r.processor_id == victim]
        idle = self.idle_rate()
        self.alive.discard(victim)
        before = self.counters()
        target = before_version + 1
        seen, done, poller = self.watch_moments(target, node)
        load = os.getloadavg()[0]
        cpu_before, killed_at = self.cpu(), time.perf_counter()
        self.ask(self.home[victim], "kill", victim)  # its session closes: no unregister
        poller.join(30)
        if not done.wait(300):
            raise TimeoutError(f"barrier {target} not decided within 300 s")
        cpu_done = self.cpu()
        if seen["state"] != 1.0:
            raise AssertionError(f"barrier {target} was not DONE")
        zk = self.zk_moments(target)
        grouper, returned = self.leader_saw(target)
        self.wait_settled()
        cpu_settled, settled_at = self.cpu()[0], time.perf_counter()
        after = self.counters()
        model = self.view.job_models.read(target)
        if victim in model.containers:
            raise AssertionError(f"v{target} still names the dead {victim}")
        used = [a - b for a, b in zip(cpu_done, cpu_before, strict=True)]
        return Death(
            gone_to_published=zk["published"] - seen["gone_wall"],
            published_to_done=zk["done"] - zk["published"],
            gone_to_done=zk["done"] - seen["gone_wall"],
            coordinator_writes=after[0] - before[0],
            coordinator_reads=after[1] - before[1],
            processor_writes=after[3] - before[3],
            processor_reads=after[4] - before[4],
            moved=tasks_moved(before_model.task_to_processor(), model.task_to_processor()),
            survivors=len(self.alive),
            cpu_processors=used[0],
            cpu_coordinator=used[1],
            cpu_coordinator_published=seen["cpu_published"] - cpu_before[1],
            cpu_zookeeper=used[2],
            cpu_rebalance=cpu_settled - cpu_before[0],
            idle_rebalance=idle * (settled_at - killed_at),
            coordinator_requests=after[2] - before[2],
            processor_requests=after[5] - before[5],
            first_join=zk["first_join"] - zk["published"],
            last_join=zk["last_join"] - zk["published"],
            last_join_to_done=zk["done"] - zk["last_join"],
            load=load,
            grouper=grouper,
            returned_late=returned - zk["published"],
            observed_to_done=seen["done"] - seen["gone"],
            observed_late=(seen["published"] - seen["gone"])
            - (zk["published"] - seen["gone_wall"]),
        )
