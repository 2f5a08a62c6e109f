"""A real job on a 3-server ZooKeeper ensemble, through the faults an ensemble brings.

The job (16 tasks, 2 coordinator replicas, 4 processors on 3 hosts, 4 s sessions, all real
processes: ``tests/jobharness.py``) runs on the session's ensemble (``zk_ensemble``,
``coordinator.launchers.ensemble``). Each test injects one fault:

- the ZooKeeper leader killed in the middle of a rebalance (once while the coordinator debounces
  a membership change, once right after it published the new version, its barrier open);
- a rolling restart of the whole ensemble, followers first, under the running job (with a
  processor joining half-way, so a rebalance runs while servers come and go);
- the server the leading coordinator is connected to frozen (SIGSTOP) past the session timeout,
  while a processor dies;
- the leading coordinator and the ZooKeeper leader killed together (kill -9), a processor
  joining at the same moment.

After each, the job must settle (one DONE model at the newest version, naming exactly the live
processors, each running exactly its tasks in it, one leader) and the checks of the randomized
fault test (``test_coordinator_faults.FaultRun.check``) must pass: I1 (every task exactly once,
on a live processor, at its location, in every stored model), I2 (versions strictly increase,
in ZooKeeper and in the coordinators' publish logs; the leader holds the epoch), I3 (from the
processors' event logs: no task on two processors at once, no start before its barrier's DONE,
never two versions at once) and I4 (task locality = the DONE model's locations).

Last, a coordinator whose publish is slower than the barrier timeout still reaches DONE: the
barrier deadline counts from the publish's completion.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jobharness import JobHarness
from test_coordinator_faults import (
    DEBOUNCE_MS,
    FREEZE_S,
    HOSTS,
    PARTITIONS,
    SESSION_TIMEOUT_MS,
    FaultRun,
    wait_stopped,
)

from coordinator.config import load_config
from coordinator.launchers.ensemble import ZooKeeperEnsemble
from coordinator.leader.service import CoordinatorService
from coordinator.member.processor import ProcessorClient
from metadata.zk import ZkMetadataStore, connect

pytestmark = [pytest.mark.zk, pytest.mark.slow]

SEED = 20261123


class EnsembleRun(FaultRun):
    """The fault test's job and checks, on an ensemble (``server`` is the ensemble)."""

    @property
    def ensemble(self) -> ZooKeeperEnsemble:
        assert isinstance(self.server, ZooKeeperEnsemble)
        return self.server

    def start(self) -> None:
        for _ in range(2):
            self.start_coordinator()
        for host in (*HOSTS, HOSTS[0]):
            self.start_processor(host)
        self.settle("the first job model")

    def round(self, kind: str, detail: str, started: float) -> None:
        """Settle and run every invariant check of the fault test."""
        self.settle(detail)
        self.rounds.append(self.check(kind, detail, started))
        result = self.rounds[-1]
        print(f"{kind}: {detail} -> v{result.done} in force, {result.seconds:.1f} s", flush=True)

    def join_processor(self) -> str:
        host = self.emptiest_host()
        pid = self.start_processor(host)
        self.job.wait_for(lambda: pid in self.job.store.processors.locality(), 20, f"{pid} joins")
        return pid

    def kill_crowded_processor(self) -> str:
        live = self.live_processors()
        crowded = sorted(p for p, h in live.items() if list(live.values()).count(h) > 1)
        pid = self.rng.choice(crowded)  # every host keeps a processor
        self.kill_processor_now(pid)
        return pid

    def wait_published(self, after: int, timeout_s: float = 20.0) -> int:
        """Wait until a version newer than ``after`` is published; returns it."""
        store = self.job.store
        self.job.wait_for(
            lambda: (store.job_models.latest_version() or 0) > after, timeout_s, "a new version"
        )
        return store.job_models.latest_version() or 0


@pytest.fixture
def ensemble_run(zk_ensemble: ZooKeeperEnsemble, tmp_path: Path) -> Iterator[EnsembleRun]:
    name = f"ens{time.monotonic_ns() % 10**9}"  # the ensemble is shared: a folder per job
    job = JobHarness(
        zk_ensemble,  # type: ignore[arg-type]
        tmp_path / "job",
        partitions=PARTITIONS,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        debounce_ms=DEBOUNCE_MS,
        debounce_max_ms=2000,
        barrier_timeout_ms=12000,
        name=name,
    )
    run = EnsembleRun(job, zk_ensemble, random.Random(SEED), SEED)  # type: ignore[arg-type]
    try:
        yield run
    finally:
        job.stop_all()


def test_zookeeper_leader_killed_in_the_middle_of_a_rebalance(ensemble_run: EnsembleRun) -> None:
    run, ensemble = ensemble_run, ensemble_run.ensemble
    run.start()
    # While the coordinator debounces a join: the election happens before it groups.
    started = time.monotonic()
    pid = run.join_processor()
    time.sleep(DEBOUNCE_MS / 2000)
    leader = ensemble.leader()
    ensemble.kill(leader)
    time.sleep(1.0)
    ensemble.start_server(leader)
    run.round("zk_leader_mid_debounce", f"{pid} joins; ZooKeeper leader {leader} killed", started)
    # Right after the publish, barrier open: processors read and join during the election.
    started = time.monotonic()
    before = run.job.store.job_models.latest_version() or 0
    pid = run.kill_crowded_processor()
    version = run.wait_published(before)
    leader = ensemble.leader()
    ensemble.kill(leader)
    time.sleep(1.0)
    ensemble.start_server(leader)
    detail = f"kill -9 {pid}; ZooKeeper leader {leader} killed as v{version} was published"
    run.round("zk_leader_mid_barrier", detail, started)


def test_rolling_restart_of_the_whole_ensemble(ensemble_run: EnsembleRun) -> None:
    run, ensemble = ensemble_run, ensemble_run.ensemble
    run.start()
    started = time.monotonic()
    leader = ensemble.leader()
    order = [i for i in range(len(ensemble.servers)) if i != leader] + [leader]
    joined = ""
    for step, index in enumerate(order):
        ensemble.restart(index, hard=False, down_s=0.5)
        ensemble.wait_quorum(30)
        if step == 0:
            joined = run.join_processor()  # a rebalance while the roll goes on
    detail = f"servers restarted in order {order} (leader {leader} last); {joined} joined"
    run.round("rolling_restart", detail, started)


def test_frozen_server_of_the_leading_coordinator(ensemble_run: EnsembleRun) -> None:
    run, ensemble = ensemble_run, ensemble_run.ensemble
    run.start()
    started = time.monotonic()
    name = run.leader()
    coordinator = run.job.coordinators[name].popen
    index = ensemble.server_of_process(coordinator.pid)
    assert index is not None, f"{name} holds no connection to the ensemble"
    pid = ensemble.servers[index].pid
    assert pid is not None
    ensemble.freeze(index)
    try:
        wait_stopped(pid)
        victim = run.kill_crowded_processor()  # the job needs a rebalance meanwhile
        time.sleep(FREEZE_S)  # past the coordinator's session timeout
    finally:
        ensemble.thaw(index)
    ensemble.wait_quorum(30)
    detail = f"server {index} of leader {name} frozen {FREEZE_S:g} s; kill -9 {victim}"
    run.round("frozen_server", detail, started)


def test_coordinator_leader_and_zookeeper_leader_killed_together(
    ensemble_run: EnsembleRun,
) -> None:
    run, ensemble = ensemble_run, ensemble_run.ensemble
    run.start()
    started = time.monotonic()
    name = run.leader()
    leader = ensemble.leader()
    pid = run.start_processor(run.emptiest_host())  # joins while both leaders are gone
    run.job.kill(run.job.coordinators[name])
    ensemble.kill(leader)
    replacement = run.start_coordinator()
    time.sleep(1.0)
    ensemble.start_server(leader)
    detail = f"kill -9 coordinator {name} and ZooKeeper leader {leader}; {pid} joins"
    run.round("both_leaders", f"{detail}; {replacement} starts", started)


class _SlowPublish(ZkMetadataStore):
    """A store whose job-model publish takes ``SLOW_PUBLISH_S`` (as a 1M-task model's does)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        publish = self.job_models.publish

        def slow_publish(*a: Any, **kw: Any) -> Any:
            time.sleep(SLOW_PUBLISH_S)
            return publish(*a, **kw)

        self.job_models.publish = slow_publish  # type: ignore[method-assign]


SLOW_PUBLISH_S = 2.5


def test_a_publish_slower_than_the_barrier_timeout_still_reaches_done(
    zk_ensemble: ZooKeeperEnsemble,
) -> None:
    """The barrier deadline counts from the publish's completion (issue 16's 1M-task probe: a
    12.5 s publish timed every barrier out at once, three rounds, never DONE)."""
    name = f"slow-{uuid.uuid4().hex[:8]}"
    config = load_config(
        data={
            "job": {"name": name, "id": "1", "run_id": "r1"},
            "zookeeper": {"connect": zk_ensemble.hosts, "root": "/affinity-test"},
            "inputs": [{"system": "kafka", "stream": "events", "partitions": 4}],
            "coordinator": {"debounce_ms": 100, "barrier_timeout_ms": 1500},
        },
        environ={},
    )
    clients = [connect(zk_ensemble.hosts) for _ in range(3)]
    stop = threading.Event()
    threads = []
    try:
        leader = _SlowPublish(clients[0], config.job_folder, run_id="r1")
        service = CoordinatorService(config, clients[0], leader)
        threads.append(threading.Thread(target=service.run, args=(stop,), daemon=True))
        for index, client in enumerate(clients[1:]):
            store = ZkMetadataStore(client, config.job_folder, run_id="r1")
            processor = ProcessorClient(
                client, store, f"p{index}", "host-a", on_start=_nothing, on_stop=_nothing
            )
            threads.append(threading.Thread(target=processor.run, args=(stop,), daemon=True))
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30
        while leader.barriers.state(1) in (None, "NEW") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert leader.barriers.state(1) == "DONE"  # not TIMED_OUT right after the publish
        model = leader.job_models.read(1)
        assert set(model.containers) == {"p0", "p1"}
    finally:
        stop.set()
        for thread in threads:
            thread.join(15)
        for client in clients:
            client.stop()
            client.close()


def _nothing(*_args: object) -> None:
    return None
