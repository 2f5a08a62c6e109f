"""Randomized faults against a real job, with DESIGN.md's invariants checked after every round.

A job (16 tasks) with 3 coordinator replicas and 5 processors across 3 hosts runs on a private
ZooKeeper, all as real processes (``tests/jobharness.py``), with 4 s sessions. Each of
:data:`ROUNDS` rounds injects one fault, chosen by ``random.Random(seed)``:

==========================  ==================================================================
``kill_processor``          SIGKILL a processor (a new one joins if fewer than 4 are left or a
                            host is left empty)
``restart_processor``       SIGKILL a processor and start one under a new id at its location
``kill_leader``             SIGKILL the leading coordinator (a replacement replica may start)
``expire_processor``        SIGSTOP a processor longer than its session timeout, then SIGCONT:
                            its session really expires while the process lives
``expire_leader``           the same for the leading coordinator
``restart_zookeeper``       kill -9 the ZooKeeper server, keep it down a while, start it again
``zookeeper_mid_rebalance`` a processor joins or dies, and the server is killed and restarted
                            while the coordinator rebalances for it
==========================  ==================================================================

Every kind of fault occurs at least twice; the rest of the rounds are drawn at random. The seed
is printed with each round's fault (``-s`` shows them; a failure repeats them with the seed):
``AFFINITY_FAULT_SEED=<int>`` (or ``random``), ``AFFINITY_FAULT_ROUNDS=<n>`` and
``AFFINITY_FAULT_KINDS=<kind>,...`` change the run.

After each round the test waits until the job has settled (one DONE model in force that names
exactly the live processors, which run exactly their tasks in it, and one leader) and stays
settled, and then checks:

- I1: the DONE model assigns every task exactly once, only to live processors, each container
  at its processor's location; every model still in ZooKeeper assigns every task exactly once,
  to processors that existed.
- I2: published versions strictly increase: the latest version and the DONE version never go
  back, a version's model never changes, decided barriers stay decided, and the coordinators'
  ``coordinator.published`` log lines name strictly increasing versions in time (so no version
  was published twice, by a deposed leader or anyone). The leader holds the epoch in force.
- I3: from the processors' event logs: no task ran on two processors at once; every start of
  version v came after barrier v was marked DONE (the barrier's ``mtime``), for every v the test
  saw in ZooKeeper (retention keeps 10 versions; the test snapshots them after every round);
  after every start, the processor's running tasks are exactly its tasks in that version (it
  never runs two versions at once).
- I4: task locality in ZooKeeper equals, for every task, the location of its processor in the
  DONE model.

A frozen processor is the one exception the event logs need: while it is stopped it runs
nothing (it cannot), and another processor may legitimately take its tasks once its session has
expired. The test therefore treats its tasks as released at the moment it was frozen, and checks
instead that the processor's very first act after SIGCONT is to stop exactly those tasks, within
:data:`RESUME_S` seconds, and that it did log the lost session.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from jobharness import JobHarness, Proc
from kazoo.exceptions import NoNodeError

from coordinator.config import load_config
from coordinator.launchers.zookeeper import EmbeddedZooKeeper as ZooKeeperServer
from coordinator.leader.service import CoordinatorService, job_tasks
from coordinator.member.processor import ProcessorClient
from metadata.model import ContainerModel, FrozenMap, JobModel, SystemStreamPartition, TaskModel
from metadata.zk import NotFound, StoreUnavailable, ZkMetadataStore, connect

pytestmark = [pytest.mark.zk, pytest.mark.slow]

DEFAULT_SEED = 20240611
ROUNDS = int(os.environ.get("AFFINITY_FAULT_ROUNDS", "20"))
HOSTS = ("host-a", "host-b", "host-c")
PARTITIONS = 16
SESSION_TIMEOUT_MS = 4000
DEBOUNCE_MS = 300
#: ZooKeeper expires a session between its timeout and one tick (2 s) later: freeze past both.
FREEZE_S = SESSION_TIMEOUT_MS / 1000 + 2.5
#: A processor that wakes up after its session expired must stop its tasks within this.
RESUME_S = 5.0
#: Allowed skew between a barrier's mtime (the ZooKeeper server's clock, ms) and a start event.
CLOCK_SLACK_S = 0.02
SETTLE_S = 45.0

FAULTS = (
    "kill_processor",
    "restart_processor",
    "kill_leader",
    "expire_processor",
    "expire_leader",
    "restart_zookeeper",
    "zookeeper_mid_rebalance",
)
ALL_TASKS = frozenset(f"Partition {i}" for i in range(PARTITIONS))


def fault_seed() -> int:
    value = os.environ.get("AFFINITY_FAULT_SEED", "")
    if value == "random":
        return random.SystemRandom().randrange(2**32)
    return int(value) if value else DEFAULT_SEED


def fault_schedule(rng: random.Random, rounds: int, kinds: tuple[str, ...] = FAULTS) -> list[str]:
    """Every kind twice and the rest at random, shuffled (fewer rounds: a random part of it)."""
    schedule = [kind for kind in kinds for _ in range(2)]
    schedule += [rng.choice(kinds) for _ in range(rounds - len(schedule))]
    rng.shuffle(schedule)
    return schedule[:rounds]


def fault_kinds() -> tuple[str, ...]:
    """``AFFINITY_FAULT_KINDS=a,b`` limits the faults (to chase one problem); default: all."""
    chosen = tuple(k for k in os.environ.get("AFFINITY_FAULT_KINDS", "").split(",") if k)
    unknown = set(chosen) - set(FAULTS)
    assert not unknown, f"unknown fault kinds {sorted(unknown)}; known: {FAULTS}"
    return chosen or FAULTS


def read_events(path: Path) -> list[dict[str, Any]]:
    """A processor's event log (a line cut short by SIGKILL is skipped)."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def log_records(proc: Proc, *events: str) -> list[dict[str, Any]]:
    """The JSON log lines of a process whose ``event`` is one of ``events``."""
    records = []
    for line in proc.log.read_text(errors="replace").splitlines():
        if not line.startswith("{") or not any(f'"{e}"' in line for e in events):
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record.get("event") in events:
            records.append(record)
    return records


def wait_stopped(pid: int, timeout_s: float = 5.0) -> None:
    """Wait until process ``pid`` is really stopped (state T in /proc)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] in ("T", "t"):
            return
        time.sleep(0.005)
    raise AssertionError(f"process {pid} did not stop within {timeout_s} s")


def stamp(record: dict[str, Any]) -> float:
    return datetime.fromisoformat(record["timestamp"]).timestamp()


def assignment_errors(model: JobModel, allowed: set[str]) -> list[str]:
    """I1: every task exactly once, only to ``allowed`` processors."""
    errors = []
    seen: dict[str, str] = {}
    for pid, container in model.containers.items():
        if pid not in allowed:
            errors.append(f"v{model.version} assigns to {pid}, not one of {sorted(allowed)}")
        for task in container.tasks:
            if task in seen:
                errors.append(f"v{model.version} assigns {task} to {seen[task]} and {pid}")
            seen[task] = pid
    if set(seen) != ALL_TASKS:
        missing, extra = sorted(ALL_TASKS - set(seen)), sorted(set(seen) - ALL_TASKS)
        errors.append(f"v{model.version} misses tasks {missing} / has unknown tasks {extra}")
    return errors


@dataclass
class Freeze:
    pid: str
    stopped: float
    resumed: float


@dataclass
class Round:
    number: int
    fault: str
    detail: str
    latest: int
    done: int
    seconds: float


@dataclass
class FaultRun:
    """The job under test and everything the checks remember between rounds."""

    job: JobHarness
    server: ZooKeeperServer
    rng: random.Random
    seed: int
    next_processor: int = 1
    next_coordinator: int = 0
    freezes: list[Freeze] = field(default_factory=list)
    models: dict[int, JobModel] = field(default_factory=dict)
    barriers: dict[int, str] = field(default_factory=dict)
    done_at: dict[int, float] = field(default_factory=dict)
    rounds: list[Round] = field(default_factory=list)
    verified_starts: int = 0
    unverified_starts: int = 0

    # ------------------------------------------------------------------ the job's parts

    def live_processors(self) -> dict[str, str]:
        return {
            pid: self.job.locations[pid]
            for pid, proc in self.job.processors.items()
            if proc.popen.poll() is None
        }

    def live_coordinators(self) -> dict[str, Proc]:
        return {n: p for n, p in self.job.coordinators.items() if p.popen.poll() is None}

    def leaders(self) -> dict[str, dict[str, Any]]:
        """Live coordinators whose log says they lead now: name -> their 'leading' record."""
        found = {}
        for name, proc in self.live_coordinators().items():
            records = log_records(proc, "coordinator.leading", "coordinator.step_down")
            if records and records[-1]["event"] == "coordinator.leading":
                found[name] = records[-1]
        return found

    def leader(self) -> str:
        self.job.wait_for(lambda: len(self.leaders()) == 1, SETTLE_S, "one leader")
        (name,) = self.leaders()
        return name

    def start_processor(self, location: str) -> str:
        pid = f"p-{self.next_processor}"
        self.next_processor += 1
        self.job.start_processor(pid, location)
        return pid

    def start_coordinator(self) -> str:
        name = f"coordinator-{self.next_coordinator}"
        self.next_coordinator += 1
        self.job.start_coordinator(name)
        return name

    def emptiest_host(self) -> str:
        live = self.live_processors()
        return min(HOSTS, key=lambda h: (sum(1 for loc in live.values() if loc == h), h))

    def kill_processor_now(self, pid: str) -> None:
        """SIGKILL, then log a stop of what it ran (from its own event log) for the replay."""
        self.job.kill(self.job.processors[pid])
        events = self.job.workdir / f"{pid}.json.events"
        running: set[str] = set()
        for record in read_events(events):
            if record["event"] == "start":
                running |= set(record["tasks"])
            else:
                running -= set(record["tasks"])
        if running:
            record = {
                "t": time.time(),
                "event": "stop",
                "processor": pid,
                "version": None,
                "tasks": sorted(running),
                "killed": True,
            }
            with open(events, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")

    def freeze(self, proc: Proc, pid: str | None) -> None:
        """SIGSTOP ``proc`` past its session's expiry, then SIGCONT it."""
        proc.popen.send_signal(signal.SIGSTOP)
        try:
            wait_stopped(proc.popen.pid)
            stopped = time.time()  # every event it wrote is older than this
            time.sleep(FREEZE_S)
        finally:
            proc.popen.send_signal(signal.SIGCONT)
        if pid is not None:
            self.freezes.append(Freeze(pid, stopped, time.time()))

    def start(self) -> None:
        for _ in range(3):
            self.start_coordinator()
        for host in HOSTS:
            self.start_processor(host)
        for _ in range(2):
            self.start_processor(self.rng.choice(HOSTS))
        self.settle("the first job model")

    # ------------------------------------------------------------------ faults

    def fault(self, kind: str) -> str:
        handler: Callable[[], str] = getattr(self, f"fault_{kind}")
        return handler()

    def fault_kill_processor(self) -> str:
        victim = self.rng.choice(sorted(self.live_processors()))
        detail = f"kill -9 {victim} ({self.job.locations[victim]})"
        self.kill_processor_now(victim)
        hosts = set(self.live_processors().values())
        if len(self.live_processors()) < 4 or hosts != set(HOSTS):
            host = self.emptiest_host()
            detail += f"; {self.start_processor(host)} joins at {host}"
        return detail

    def fault_restart_processor(self) -> str:
        victim = self.rng.choice(sorted(self.live_processors()))
        location = self.job.locations[victim]
        self.kill_processor_now(victim)
        return f"kill -9 {victim}, restart as {self.start_processor(location)} at {location}"

    def fault_kill_leader(self) -> str:
        leader = self.leader()
        self.job.kill(self.job.coordinators[leader])
        detail = f"kill -9 leader {leader}"
        live = len(self.live_coordinators())
        if live < 2 or (live < 3 and self.rng.random() < 0.5):
            detail += f"; {self.start_coordinator()} starts"
        return detail

    def fault_expire_processor(self) -> str:
        victim = self.rng.choice(sorted(self.live_processors()))
        proc = self.job.processors[victim]
        lost_before = len(log_records(proc, "processor.session_lost"))
        self.freeze(proc, victim)
        self.job.wait_for(
            lambda: len(log_records(proc, "processor.session_lost")) > lost_before,
            RESUME_S + 5,
            f"{victim} to notice its expired session",
        )
        return f"SIGSTOP {victim} for {FREEZE_S:g} s (session expires), SIGCONT"

    def fault_expire_leader(self) -> str:
        leader = self.leader()
        proc = self.job.coordinators[leader]
        downs_before = len(log_records(proc, "coordinator.step_down"))
        self.freeze(proc, None)
        self.job.wait_for(
            lambda: len(log_records(proc, "coordinator.step_down")) > downs_before,
            RESUME_S + 5,
            f"the frozen leader {leader} to step down",
        )
        return f"SIGSTOP leader {leader} for {FREEZE_S:g} s (session expires), SIGCONT"

    def fault_restart_zookeeper(self) -> str:
        down = round(self.rng.uniform(0.5, 2.5), 2)
        self.server.restart(hard=True, down_s=down)
        return f"kill -9 ZooKeeper, down {down} s, restart"

    def fault_zookeeper_mid_rebalance(self) -> str:
        live = self.live_processors()
        store = self.job.store
        if len(live) < 6 and (len(live) <= 4 or self.rng.random() < 0.5):
            host = self.rng.choice(HOSTS)
            pid = self.start_processor(host)
            detail = f"{pid} joins at {host}"
            self.job.wait_for(lambda: pid in store.processors.locality(), 20, f"{pid} to register")
        else:
            crowded = [p for p, h in live.items() if list(live.values()).count(h) > 1]
            pid = self.rng.choice(sorted(crowded))  # every host keeps a processor
            detail = f"kill -9 {pid}"
            self.kill_processor_now(pid)
            self.job.wait_for(
                lambda: pid not in store.processors.locality(),
                SESSION_TIMEOUT_MS / 1000 + 5,
                f"{pid}'s session to expire",
            )
        delay = round(self.rng.uniform(0.0, DEBOUNCE_MS / 1000 + 0.4), 2)
        down = round(self.rng.uniform(0.5, 2.0), 2)
        time.sleep(delay)
        self.server.restart(hard=True, down_s=down)
        return f"{detail}; {delay} s later kill -9 ZooKeeper, down {down} s, restart"

    # ------------------------------------------------------------------ settling

    def quiet(self) -> bool:
        return self.job.settled() and len(self.leaders()) == 1

    def settle(self, what: str) -> None:
        """Wait until settled, and still settled on the same version a second later."""
        deadline = time.monotonic() + SETTLE_S
        while True:
            left = max(1.0, deadline - time.monotonic())
            self.job.wait_for(self.quiet, left, f"{what} to settle")
            version = self.job.store.job_models.latest_version()
            time.sleep(1.0)
            if self.quiet() and self.job.store.job_models.latest_version() == version:
                return
            assert time.monotonic() < deadline, f"{what}: the job did not stay settled"

    # ------------------------------------------------------------------ checks

    def snapshot(self) -> None:
        """Read every job model and barrier still in ZooKeeper into the caches (I2 checks)."""
        store = self.job.store
        client = store.client
        for name in client.get_children(store.layout.job_models):
            version = int(name)
            try:
                model = store.job_models.read(version)
            except NotFound:
                continue  # not committed (an abandoned attempt) or removed meanwhile
            cached = self.models.setdefault(version, model)
            assert cached.containers == model.containers, f"job model v{version} changed"
        for name in client.get_children(store.layout.barriers):
            version = int(name.removeprefix("barrier_"))
            try:
                data, stat = client.get(store.layout.barrier_state(version))
            except NoNodeError:  # removed by retention meanwhile
                continue
            state = data.decode()
            before = self.barriers.get(version)
            assert before in (None, "NEW", state), f"barrier {version} went {before} -> {state}"
            self.barriers[version] = state
            if state == "DONE":
                self.done_at[version] = stat.mtime / 1000

    def check(self, fault: str, detail: str, started: float) -> Round:
        job, store = self.job, self.job.store
        model = job.done_model()
        latest = store.job_models.latest_version()
        assert model is not None and latest is not None
        live = self.live_processors()

        # I1: the model in force.
        assert set(model.containers) == set(live), (model.version, sorted(live))
        assert assignment_errors(model, set(live)) == []
        for pid, container in model.containers.items():
            assert container.location_id == live[pid], (pid, container.location_id, live[pid])

        # I1 and I2 over every model still stored.
        self.snapshot()
        ever = set(job.processors)
        for version, stored in self.models.items():
            assert assignment_errors(stored, ever) == [], version
        assert self.barriers.get(model.version) == "DONE"
        if self.rounds:
            last = self.rounds[-1]
            assert latest >= last.latest, f"latest version went back: {last.latest} -> {latest}"
            assert model.version >= last.done, f"DONE version went back: {last.done} -> {model}"
        self.check_publications()

        # I3, from the event logs.
        self.check_event_logs()

        # I4: the owners wrote their tasks' locations (just after DONE: allow them a moment).
        expected = {t: c.location_id for c in model.containers.values() for t in c.tasks}
        job.wait_for(
            lambda: store.locality.read() == expected,
            10,
            f"task locality to match v{model.version}",
        )
        return Round(
            len(self.rounds) + 1,
            fault,
            detail,
            latest,
            model.version,
            time.monotonic() - started,
        )

    def check_publications(self) -> None:
        """I2 from the coordinators' logs: published versions strictly increase in time, and the
        leader holds the epoch in force."""
        published = []
        for proc in self.job.coordinators.values():
            published += log_records(proc, "coordinator.published")
        published.sort(key=stamp)
        versions = [r["version"] for r in published]
        assert versions == sorted(set(versions)), f"published versions out of order: {versions}"
        epochs = [r["epoch"] for r in published]
        assert epochs == sorted(epochs), f"publishing epochs went back: {epochs}"
        (record,) = self.leaders().values()
        epoch = self.job.store.epochs.current()
        assert epoch is not None and epoch.epoch == record["epoch"], (epoch, record["epoch"])

    def check_event_logs(self) -> None:
        """I3: replay every start and stop of every processor in time order."""
        records: list[dict[str, Any]] = []
        for pid in self.job.processors:
            records += read_events(self.job.workdir / f"{pid}.json.events")
        records += [
            {"t": f.stopped, "event": "freeze", "processor": f.pid, "tasks": []}
            for f in self.freezes
        ]
        records.sort(key=lambda r: r["t"])
        resumed = {(f.pid, f.stopped): f.resumed for f in self.freezes}
        owner: dict[str, str] = {}
        running: dict[str, set[str]] = {}
        frozen: dict[str, tuple[set[str], float]] = {}  # pid -> (tasks to stop, resumed at)
        self.verified_starts = self.unverified_starts = 0
        for record in records:
            pid, kind, tasks = record["processor"], record["event"], set(record["tasks"])
            mine = running.setdefault(pid, set())
            if kind == "freeze":
                # Frozen, it runs nothing: its tasks are free once its session is gone.
                frozen[pid] = (set(mine), resumed[(pid, record["t"])])
                for task in mine:
                    if owner.get(task) == pid:
                        del owner[task]
                continue
            if pid in frozen:
                held, resumed_at = frozen.pop(pid)
                if held:
                    assert kind == "stop" and tasks == held, (
                        f"{pid}'s first act after its freeze was {kind} {sorted(tasks)}, "
                        f"not stopping {sorted(held)}"
                    )
                    late = record["t"] - resumed_at
                    assert late <= RESUME_S, f"{pid} stopped its tasks {late:.1f} s after SIGCONT"
            if kind == "stop":
                mine -= tasks
                for task in tasks:
                    if owner.get(task) == pid:
                        del owner[task]
                continue
            version = record["version"]
            for task in tasks:
                assert owner.get(task, pid) == pid, (
                    f"{task} started on {pid} (v{version}) while running on {owner[task]}"
                )
                owner[task] = pid
            mine |= tasks
            state = self.barriers.get(version)
            if state is None:
                self.unverified_starts += 1  # removed by retention before the test saw it
            else:
                assert state == "DONE", f"{pid} started tasks of v{version}, barrier {state}"
                assert record["t"] >= self.done_at[version] - CLOCK_SLACK_S, (
                    f"{pid} started tasks of v{version} "
                    f"{self.done_at[version] - record['t']:.3f} s before barrier DONE"
                )
                self.verified_starts += 1
            model = self.models.get(version)
            if model is not None:
                assert pid in model.containers, f"{pid} started v{version}, which omits it"
                assigned = set(model.containers[pid].tasks)
                assert mine == assigned, (
                    f"{pid} runs {sorted(mine)} after starting v{version}, "
                    f"which gives it {sorted(assigned)}"
                )


@pytest.fixture
def fault_run(zk_private_server: ZooKeeperServer, tmp_path: Path) -> Iterator[FaultRun]:
    seed = fault_seed()
    job = JobHarness(
        zk_private_server,
        tmp_path / "job",
        partitions=PARTITIONS,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        debounce_ms=DEBOUNCE_MS,
        debounce_max_ms=2000,
        barrier_timeout_ms=12000,
    )
    try:
        yield FaultRun(job, zk_private_server, random.Random(seed), seed)
    finally:
        job.stop_all()


def test_randomized_faults_keep_the_invariants(fault_run: FaultRun) -> None:
    run = fault_run
    kinds = fault_kinds()
    schedule = fault_schedule(run.rng, ROUNDS, kinds)
    print(f"\nfault seed {run.seed} (AFFINITY_FAULT_SEED={run.seed} repeats it)", flush=True)
    began = time.monotonic()
    history: list[str] = []
    try:
        run.start()
        for number, kind in enumerate(schedule, 1):
            started = time.monotonic()
            detail = run.fault(kind)
            run.settle(f"round {number} ({detail})")
            result = run.check(kind, detail, started)
            run.rounds.append(result)
            line = (
                f"round {number:2}: {kind:<23} {detail} -> v{result.done} in force "
                f"(latest v{result.latest}), {result.seconds:.1f} s"
            )
            history.append(line)
            print(line, flush=True)
    except AssertionError as exc:
        raise AssertionError(
            f"seed {run.seed}, after rounds:\n" + "\n".join(history) + f"\n{exc}"
        ) from exc
    versions = [r.done for r in run.rounds]
    print(
        f"{len(run.rounds)} rounds in {time.monotonic() - began:.0f} s; versions in force "
        f"{versions}; {run.verified_starts} starts checked against their barrier, "
        f"{run.unverified_starts} of versions removed before the test saw them",
        flush=True,
    )
    assert len(run.rounds) == ROUNDS
    assert run.verified_starts > 0
    if len(run.rounds) >= 2 * len(kinds):
        assert set(schedule) == set(kinds)


# ---------------------------------------------------------------------- regression tests


def test_a_new_leader_completes_the_barrier_it_inherits(zk_server: ZooKeeperServer) -> None:
    """A leader that takes over while barrier v is NEW must hear of processors joining v later.

    It used to watch only the barriers it published itself: barrier v then stayed NEW until the
    barrier timeout, was marked TIMED_OUT and a new version had to be generated.
    """
    name = f"inherit-{uuid.uuid4().hex[:8]}"
    config = load_config(
        data={
            "job": {"name": name, "id": "1", "run_id": "r1"},
            "zookeeper": {"connect": zk_server.hosts, "root": "/affinity-test"},
            "inputs": [{"system": "kafka", "stream": "events", "partitions": 4}],
            "coordinator": {"debounce_ms": 100, "barrier_timeout_ms": 30000},
        },
        environ={},
    )
    previous = connect(zk_server.hosts)
    client = connect(zk_server.hosts)
    stop = threading.Event()
    thread: threading.Thread | None = None
    try:
        # The previous leader published v1 for p1 and p2 and vanished; only p1 has joined.
        old = ZkMetadataStore(previous, config.job_folder, run_id="r1")
        old.ensure_layout()
        tasks = job_tasks(config)
        containers = {
            pid: ContainerModel(pid, f"host-{pid}", FrozenMap({t.name: t for t in tasks[i::2]}))
            for i, pid in enumerate(("p1", "p2"))
        }
        job_config = {"job.name": name, "job.id": "1", "run.id": "r1"}
        model = JobModel(1, FrozenMap(containers), FrozenMap(job_config))
        old.job_models.publish(model, epoch=old.epochs.acquire(), participants=["p1", "p2"])
        for pid in ("p1", "p2"):
            old.processors.register(pid, f"host-{pid}")
        old.barriers.join(1, "p1")

        store = ZkMetadataStore(client, config.job_folder, run_id="r1")
        service = CoordinatorService(config, client, store)
        thread = threading.Thread(target=service.run, args=(stop,), daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not service.is_leader and time.monotonic() < deadline:
            time.sleep(0.05)
        assert service.is_leader
        time.sleep(0.5)  # the new leader has read the state (p1 joined, p2 not yet)
        assert old.barriers.state(1) == "NEW"

        old.barriers.join(1, "p2")
        deadline = time.monotonic() + 5
        while old.barriers.state(1) == "NEW" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert old.barriers.state(1) == "DONE"  # at once, not TIMED_OUT after 30 s
        time.sleep(0.5)
        assert old.job_models.latest_version() == 1  # and nothing else was needed
    finally:
        stop.set()
        if thread is not None:
            thread.join(15)
        for kazoo in (previous, client):
            kazoo.stop()
            kazoo.close()


class _FlakyJoin(ZkMetadataStore):
    """A store whose first barrier join fails as if ZooKeeper had been unreachable too long."""

    failures = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        join, join_and_watch = self.barriers.join, self.barriers.join_and_watch

        def fail_once(version: int) -> None:
            if self.failures == 0:
                self.failures += 1
                raise StoreUnavailable(self.layout.barrier(version), "join barrier: no answer")

        def flaky_join(version: int, processor_id: str) -> None:
            fail_once(version)
            join(version, processor_id)

        def flaky_join_and_watch(version: int, processor_id: str, *args: Any, **kw: Any) -> Any:
            fail_once(version)  # (a join sent with the barrier's first read)
            return join_and_watch(version, processor_id, *args, **kw)

        self.barriers.join = flaky_join  # type: ignore[method-assign]
        self.barriers.join_and_watch = flaky_join_and_watch  # type: ignore[method-assign]


def test_a_processor_retries_a_version_it_failed_to_follow(zk_server: ZooKeeperServer) -> None:
    """A store error while following version v is retried: the processor joins barrier v.

    It used to mark v as seen before following it, so the retry it queued was a no-op: the
    processor never joined, and the barrier waited for its timeout (30 s by default).
    """
    folder = f"/affinity-test/flaky-{uuid.uuid4().hex[:8]}"
    leader = connect(zk_server.hosts)
    client = connect(zk_server.hosts)
    stop = threading.Event()
    thread: threading.Thread | None = None
    try:
        store = ZkMetadataStore(leader, folder, run_id="r1")
        store.ensure_layout()
        flaky = _FlakyJoin(client, folder, run_id="r1")
        started: list[int] = []
        processor = ProcessorClient(
            client,
            flaky,
            "p1",
            "host-a",
            on_start=lambda version, tasks: started.append(version),
            on_stop=lambda version, tasks: None,
        )
        thread = threading.Thread(target=processor.run, args=(stop,), daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while "p1" not in store.processors.locality() and time.monotonic() < deadline:
            time.sleep(0.05)
        task = TaskModel("Partition 0", frozenset({SystemStreamPartition("kafka", "e", 0)}))
        container = ContainerModel("p1", "host-a", FrozenMap({task.name: task}))
        model = JobModel(1, FrozenMap({"p1": container}), FrozenMap({}))
        store.job_models.publish(model, epoch=store.epochs.acquire(), participants=["p1"])

        deadline = time.monotonic() + 5
        while not store.barriers.participants(1) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert flaky.failures == 1
        assert store.barriers.participants(1) == {"p1"}  # joined after the failure
    finally:
        stop.set()
        if thread is not None:
            thread.join(15)
        for kazoo in (leader, client):
            kazoo.stop()
            kazoo.close()
