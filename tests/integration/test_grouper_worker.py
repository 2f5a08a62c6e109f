"""The grouper's worker process (issue 15 item 2 and "Also"): killed at its time limit, no
thread left behind, SystemExit and a dying worker reported as what they are, warm between runs.
No ZooKeeper here; the coordinator around it is tested in test_coordinator_hardening.py."""

from __future__ import annotations

import itertools
import pickle
import threading
import time

import pytest
from hostile_groupers import AllToFirst, CollectorProbe, Exits, GilHog, Sleeper

from coordinator.leader.grouper_wire import decode_tasks, encode_tasks
from coordinator.leader.grouper_worker import GrouperWorker
from groupers import GrouperMetadata, validate
from metadata.model import SystemStreamPartition, TaskModel

TASKS = tuple(
    TaskModel(f"Partition {n}", frozenset({SystemStreamPartition("kafka", "events", n)}), n)
    for n in range(8)
)
METADATA = GrouperMetadata({"p-0": "h-a", "p-1": "h-b"}, {}, {})


@pytest.fixture
def worker_factory():  # type: ignore[no-untyped-def]
    made: list[GrouperWorker] = []

    def make(**kw: object) -> GrouperWorker:
        worker = GrouperWorker("host-affinity", {}, **kw)  # type: ignore[arg-type]
        made.append(worker)
        return worker

    yield make
    for worker in made:
        worker.close()


def test_a_grouper_holding_the_gil_is_stopped_at_its_deadline(worker_factory) -> None:  # type: ignore[no-untyped-def]
    worker = worker_factory(instance=GilHog())
    threads = threading.active_count()
    ticks: list[float] = []
    stop = threading.Event()

    def tick() -> None:  # a thread of this process keeps running while the grouper runs
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.05)

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    for _ in range(3):
        started = time.monotonic()
        outcome = worker.run(TASKS, METADATA, 1.0)
        took = time.monotonic() - started
        assert outcome.containers is None and outcome.error is not None
        assert outcome.error.startswith("timed out after 1 s"), outcome.error
        assert outcome.seconds < 1.3, outcome.seconds  # the deadline (the start not counted)
        assert took < 6.0, took  # plus starting a process, and killing it
        assert worker.pid is None  # the process was killed, not left to finish
    stop.set()
    ticker.join()
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert max(gaps) < 0.5, max(gaps)  # the GIL stayed ours
    assert threading.active_count() == threads  # no thread per timed-out run


def test_handing_the_tasks_over_is_not_counted_in_the_time_limit(worker_factory) -> None:  # type: ignore[no-untyped-def]
    """The tasks' hand-over (about 2.6 s at 1,000,000 partitions here) is not the grouper's
    time. Here 10,000 tasks of 100 partitions each: a hand-over of a million partitions for a
    grouper with little to do, under a limit of half what the hand-over costs."""
    many = tuple(
        TaskModel(
            f"Partition {n}",
            frozenset(SystemStreamPartition("kafka", "events", n * 100 + k) for k in range(100)),
            n,
        )
        for n in range(10_000)
    )
    started = time.perf_counter()  # what the hand-over costs on this machine
    assert decode_tasks(pickle.loads(pickle.dumps(encode_tasks(many)))) == many
    limit = (time.perf_counter() - started) / 2
    worker = worker_factory(instance=AllToFirst())
    outcome = worker.run(many, METADATA, limit)
    assert outcome.error is None, outcome.error
    assert outcome.seconds < limit
    (container,) = outcome.containers  # type: ignore[misc]
    assert len(container.tasks) == len(many)
    # A second run with the same tasks sends none.
    assert worker.run(many, METADATA, limit).error is None


def test_the_grouper_runs_with_the_garbage_collector_paused(worker_factory) -> None:  # type: ignore[no-untyped-def]
    worker = worker_factory(instance=CollectorProbe())
    for _ in range(2):  # and again on the next run
        outcome = worker.run(TASKS, METADATA, 10)
        assert outcome.error is None and outcome.containers == ("collector enabled", False)


def test_a_late_answer_is_never_returned(worker_factory) -> None:  # type: ignore[no-untyped-def]
    worker = worker_factory(instance=Sleeper(1.5))
    outcome = worker.run(TASKS, METADATA, 0.5)
    assert outcome.containers is None and "timed out" in (outcome.error or "")
    time.sleep(1.5)  # the answer it would have sent by now is gone with its process
    fresh = worker_factory(instance=Sleeper(0.0))
    assert fresh.run(TASKS, METADATA, 5).error is None


def test_a_run_is_ended_at_once_by_an_interrupt_from_another_thread(worker_factory) -> None:  # type: ignore[no-untyped-def]
    """What a grouper run asked during a recheck does (coordinator.leader.recheck)."""
    worker = worker_factory(instance=Sleeper(30.0))
    outcomes = []
    running = threading.Thread(target=lambda: outcomes.append(worker.run(TASKS, METADATA, 60)))
    running.start()
    deadline = time.monotonic() + 30
    while worker.pid is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # started, holds the tasks, sleeping in the grouper
    asked = time.monotonic()
    worker.interrupt()
    running.join(10)
    assert not running.is_alive() and time.monotonic() - asked < 5
    assert outcomes[0].containers is None and "died (exit code -9)" in (outcomes[0].error or "")
    assert worker.pid is None  # reaped by the thread that ran it
    worker.interrupt()  # nothing runs: nothing to do
    worker.instance = Sleeper(0.0)
    assert worker.run(TASKS, METADATA, 10).error is None  # a fresh process


@pytest.mark.parametrize(
    ("hard", "expected"),
    [(False, "SystemExit: grouper gave up"), (True, "the grouper process died (exit code 3)")],
)
def test_system_exit_and_a_dying_worker_are_reported_as_what_they_are(
    worker_factory, hard: bool, expected: str
) -> None:  # type: ignore[no-untyped-def]
    worker = worker_factory(instance=Exits(hard=hard))
    outcome = worker.run(TASKS, METADATA, 10)
    assert outcome.containers is None and outcome.error == expected
    again = worker.run(TASKS, METADATA, 10)  # a dead worker is replaced
    assert again.error == expected


def test_a_warm_worker_answers_by_name_without_a_process_start(worker_factory) -> None:  # type: ignore[no-untyped-def]
    restarts: list[int] = []
    worker = worker_factory(on_start=lambda: restarts.append(1))
    first = worker.run(TASKS, METADATA, 30)
    assert first.error is None
    validate(TASKS, METADATA, first.containers)  # type: ignore[arg-type]
    pid = worker.pid
    for _ in range(3):
        assert worker.run(TASKS, METADATA, 30).containers == first.containers
    assert worker.pid == pid and len(restarts) == 1


def test_standbys_and_replica_metadata_cross_to_the_worker_and_back(worker_factory) -> None:  # type: ignore[no-untyped-def]
    from groupers import get_grouper

    metadata = GrouperMetadata(
        {"p-0": "zone-a/h-a", "p-1": "zone-b/h-b", "p-2": "zone-b/h-c"},
        {},
        {},
        processor_capacity={"p-0": 2},
        task_state={"Partition 0": {"p-2": 0}, "Partition 1": {"p-1": 5}},
    )
    options = {"standby_replicas": 1}
    worker = GrouperWorker("host-affinity", options)
    try:
        outcome = worker.run(TASKS, metadata, 30)
    finally:
        worker.close()
    assert outcome.error is None
    expected = get_grouper("host-affinity", **options).group(TASKS, metadata)
    assert outcome.containers == expected
    assert sum(len(c.standby_tasks) for c in outcome.containers) == len(TASKS)  # type: ignore[union-attr]


# A user's driver script (no `if __name__ == "__main__":` guard) whose embedded coordinator runs
# the grouper: the worker must not run the script again, nor need its file (python - < script).
_SCRIPT = """
import os, sys
from coordinator.leader.grouper_worker import GrouperWorker
from groupers import GrouperMetadata
from metadata.model import SystemStreamPartition, TaskModel

with open(os.environ["RUNS_FILE"], "a") as runs:
    runs.write("script ran\\n")
tasks = tuple(
    TaskModel(f"Partition {i}", frozenset({SystemStreamPartition("k", "s", i)})) for i in range(4)
)
worker = GrouperWorker("host-affinity", {})
outcome = worker.run(tasks, GrouperMetadata({"p-1": "h1"}, {}, {}), 30.0)
worker.close()
print("grouped:", outcome.error or sorted(len(c.tasks) for c in outcome.containers))
"""


@pytest.mark.parametrize("how", ["file", "stdin"])
def test_the_worker_does_not_run_the_parents_main_script_again(tmp_path, how: str) -> None:  # type: ignore[no-untyped-def]
    import os
    import subprocess
    import sys

    script, runs = tmp_path / "driver.py", tmp_path / "runs.txt"
    script.write_text(_SCRIPT)
    command = [sys.executable, str(script)] if how == "file" else [sys.executable, "-"]
    done = subprocess.run(
        command,
        input=None if how == "file" else _SCRIPT,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "RUNS_FILE": str(runs)},
    )
    assert done.returncode == 0, done.stderr
    assert "grouped: [4]" in done.stdout, done.stdout + done.stderr
    assert runs.read_text() == "script ran\n"  # once: not again in the grouper process
