"""The coordinator against a real ZooKeeper, with coordinator and processor processes.

Each test has its own ZooKeeper server (so it may kill and restart it) and its own processes.
"""

from __future__ import annotations

import signal
import time

import pytest
from jobharness import JobHarness

from coordinator.launchers.zookeeper import EmbeddedZooKeeper as ZooKeeperServer

pytestmark = [pytest.mark.zk, pytest.mark.slow]


def start(job: JobHarness, layout: dict[str, str], coordinators: int = 1) -> None:
    for i in range(coordinators):
        job.start_coordinator(f"coordinator-{i}")
    for pid, location in layout.items():
        job.start_processor(pid, location)
    job.wait_for(job.settled, 30, "the first job model to settle")


def test_killed_processor_only_its_tasks_move_to_its_host(job_factory: type[JobHarness]) -> None:
    # Two processors per host; slack lets the host-mate absorb every task of the dead one.
    job = job_factory(partitions=12, grouper_options={"balance_slack": 3})
    start(job, {"a-1": "host-a", "a-2": "host-a", "b-1": "host-b", "b-2": "host-b"})
    before = job.done_model()
    assert before is not None
    job.kill(job.processors["a-1"])
    job.mark_dead("a-1")
    job.wait_for(job.settled, 30, "the job to settle without a-1")
    after = job.done_model()
    assert after is not None
    assert after.version == before.version + 1  # exactly one new version
    owner_before, owner_after = before.task_to_processor(), after.task_to_processor()
    moved = {t for t in owner_after if owner_before[t] != owner_after[t]}
    assert moved == {t for t, p in owner_before.items() if p == "a-1"}
    assert all(owner_after[t] == "a-2" for t in moved)
    job.assert_no_task_ran_twice_at_once()


def test_killed_leader_is_replaced_within_session_timeout_plus_2s(
    job_factory: type[JobHarness],
) -> None:
    job = job_factory(session_timeout_ms=4000)
    start(job, {"p-1": "host-a", "p-2": "host-b"}, coordinators=2)
    job.wait_for(lambda: job.leader() is not None, 10, "a leader")
    leader = job.leader()
    assert leader is not None
    killed_at = time.monotonic()
    job.kill(job.coordinators[leader])
    took = job.wait_for(
        lambda: job.leader() not in (None, leader), job.session_timeout_s + 6, "a new leader"
    )
    assert time.monotonic() - killed_at <= job.session_timeout_s + 2.0, took
    # The new leader handles the next change.
    before = job.done_model()
    assert before is not None
    job.start_processor("p-3", "host-c")
    job.wait_for(job.settled, 30, "the new leader to add p-3")
    after = job.done_model()
    assert after is not None and after.version > before.version and "p-3" in after.containers


def test_a_leader_that_lost_its_session_publishes_nothing(job_factory: type[JobHarness]) -> None:
    job = job_factory(session_timeout_ms=4000)
    start(job, {"p-1": "host-a", "p-2": "host-b"}, coordinators=2)
    job.wait_for(lambda: job.leader() is not None, 10, "a leader")
    old = job.leader()
    assert old is not None
    frozen = job.coordinators[old]
    frozen.popen.send_signal(signal.SIGSTOP)  # alive, but its session expires
    try:
        job.wait_for(lambda: job.leader() not in (None, old), 20, "a new leader")
        job.start_processor("p-3", "host-c")
        job.wait_for(job.settled, 30, "the new leader to add p-3")
        version = job.store.job_models.latest_version()
    finally:
        frozen.popen.send_signal(signal.SIGCONT)
    # The old leader wakes up with queued events and a dead session: it must not publish.
    time.sleep(3.0)
    assert job.store.job_models.latest_version() == version
    log = frozen.log.read_text()
    assert '"coordinator.step_down"' in log
    job.wait_for(job.settled, 15, "the job to stay settled")


def test_zookeeper_restart_mid_rebalance_converges_to_one_done_model(
    job_factory: type[JobHarness], zk_private_server: ZooKeeperServer
) -> None:
    job = job_factory(session_timeout_ms=8000, debounce_ms=200)
    start(job, {"p-1": "host-a", "p-2": "host-b"}, coordinators=2)
    job.start_processor("p-3", "host-c")  # a rebalance begins...
    time.sleep(0.3)
    zk_private_server.restart(hard=True, down_s=1.0)  # ...and the server dies under it
    job.wait_for(job.settled, 45, "convergence after the ZooKeeper restart")
    model = job.done_model()
    assert model is not None and set(model.containers) == {"p-1", "p-2", "p-3"}
    job.assert_no_task_ran_twice_at_once()


def test_rolling_restart_with_grace_keeps_every_task_on_its_host(
    job_factory: type[JobHarness],
) -> None:
    job = job_factory(partitions=12, processor_grace_ms=8000, debounce_ms=200)
    layout = {"p-a": "host-a", "p-b": "host-b", "p-c": "host-c"}
    start(job, layout)
    first = job.done_model()
    assert first is not None
    home = {t: layout[p] for t, p in first.task_to_processor().items()}
    for n, (pid, location) in enumerate(sorted(layout.items())):
        job.kill(job.processors[pid])
        job.mark_dead(pid)
        del job.processors[pid]
        job.start_processor(f"{pid}-v{n + 2}", location)  # a new id at the same host
        job.wait_for(job.settled, 30, f"the job to settle after restarting {pid}")
    final = job.done_model()
    assert final is not None
    where = {pid: job.locations[pid] for pid in final.containers}
    assert {t: where[p] for t, p in final.task_to_processor().items()} == home
    job.assert_no_task_ran_twice_at_once()
