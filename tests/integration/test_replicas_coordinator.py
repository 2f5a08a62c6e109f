"""Replicas and capacity (issue 13), the coordinator's part, against a real ZooKeeper with real
coordinator and processor processes (``affinity coordinator run``, ``affinity processor run``).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import threading
import urllib.request
from collections.abc import Mapping

import pytest
from jobharness import AFFINITY, JobHarness, Proc

from coordinator.launchers.zookeeper import EmbeddedZooKeeper as ZooKeeperServer
from coordinator.member.processor import ProcessorClient
from metadata.model import JobModel, TaskModel
from metadata.zk import ZkMetadataStore, connect

pytestmark = [pytest.mark.zk, pytest.mark.slow]


def test_processors_get_tasks_in_proportion_to_their_registered_capacity(
    job_factory: type[JobHarness],
) -> None:
    job = job_factory(partitions=12)
    job.start_coordinator("coordinator-0")
    job.start_processor("big", "host-a", "--capacity", "3")
    job.start_processor("small", "host-b")
    job.wait_for(job.settled, 60, "the first job model to settle")
    model = job.done_model()
    assert model is not None
    assert {pid: len(c.tasks) for pid, c in model.containers.items()} == {"big": 9, "small": 3}
    live, _ = job.store.processors.read()
    assert {r.processor_id: r.capacity for r in live} == {"big": 3, "small": 1}


def test_a_bad_capacity_is_refused_in_one_line(job_factory: type[JobHarness]) -> None:
    job = job_factory()
    run = subprocess.run(
        [
            AFFINITY,
            "processor",
            "run",
            "--config",
            str(job.config),
            "--processor-id",
            "p",
            "--location",
            "h",
            "--capacity",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert run.stderr.strip() == "affinity: error: --capacity must be an integer >= 1, got '0'"


def standbys(job: JobHarness, pid: str) -> dict[str, int]:
    """Standby task -> version, as processor ``pid`` last reported it (its status file)."""
    status = job.workdir / f"{pid}.json"
    return dict(json.loads(status.read_text()).get("standby", {})) if status.exists() else {}


def done_models(job: JobHarness) -> list[JobModel]:
    """Every job model still stored whose barrier is DONE, oldest first."""
    store = job.store
    versions = [v for v in store.job_models.versions() if store.barriers.state(v) == "DONE"]
    return [store.job_models.read(v) for v in sorted(versions)]


def moved(before: JobModel, after: JobModel) -> set[str]:
    owner = before.task_to_processor()
    return {t for t, p in after.task_to_processor().items() if owner.get(t) != p}


def coordinator_port(proc: Proc) -> int:
    """The coordinator's HTTP port (``http_port: 0``), from its ``coordinator.started`` line."""
    for line in proc.log.read_text().splitlines():
        if line.startswith("{") and '"coordinator.started"' in line:
            return int(json.loads(line)["http_port"])
    raise AssertionError(f"no coordinator.started line in {proc.log}")


def probing(port: int) -> float:
    """The leader's ``affinity_probing`` gauge."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith("affinity_probing "):
                return float(line.split()[1])
    raise AssertionError("no affinity_probing in /metrics")


def test_a_warm_up_completes_through_probing_rebalances(job_factory: type[JobHarness]) -> None:
    job = job_factory(
        partitions=6,
        grouper_options={"max_warmup_replicas": 2, "acceptable_recovery_lag": 0},
        coordinator_options={"probing_rebalance_interval_ms": 500},
    )
    job.start_coordinator("coordinator-0")
    job.start_processor("a", "host-a")
    job.start_processor("b", "host-b")
    job.wait_for(job.settled, 60, "the first job model to settle")
    first = job.done_model()
    assert first is not None

    job.start_processor("c", "host-c", "--standby-catch-up-ms", "3000")
    # c gets warm-up replicas first: no task moves while their copies catch up.
    job.wait_for(lambda: len(standbys(job, "c")) == 2, 30, "c to warm up two copies")
    warming = job.done_model()
    assert warming is not None and not warming.containers["c"].tasks
    assert set(warming.containers["c"].standby_tasks) == set(standbys(job, "c"))
    assert moved(first, warming) == set()
    assert job.store.standby_lag.read(["c"]) == {"c": dict.fromkeys(standbys(job, "c"), 1)}
    warm = set(warming.containers["c"].standby_tasks)
    port = coordinator_port(job.coordinators["coordinator-0"])
    assert probing(port) == 1.0  # the leader knows the warm-up is pending

    # Caught up (lag 0 after 3 s): a probing rebalance moves exactly those tasks to c.
    job.wait_for(lambda: len(job.running("c")) == 2, 30, "the warmed-up tasks to move to c")
    job.wait_for(job.settled, 30, "the job to settle")
    final = job.done_model()
    assert final is not None and set(final.containers["c"].tasks) == warm
    assert moved(warming, final) == warm
    history = {e.version: e.trigger for e in job.store.history.read()}
    assert history[warming.version] == "processors new"
    assert history[final.version] == "probing"
    # Probes whose answer equalled the model in force published nothing in between.
    assert final.version == warming.version + 1
    job.wait_for(lambda: probing(port) == 0.0, 10, "the final model's recheck to stop probing")
    job.assert_no_task_ran_twice_at_once()
    events = [e for e in job.events() if e["processor"] == "c"]
    assert [e["event"] for e in events][:1] == ["standby_start"]
    assert any(e["event"] == "standby_stop" and set(e["tasks"]) == warm for e in events)


def test_the_movement_limit_holds_over_a_scale_out(job_factory: type[JobHarness]) -> None:
    job = job_factory(
        partitions=12,
        grouper_options={"max_moves_per_rebalance": 2},
        coordinator_options={"probing_rebalance_interval_ms": 300},
        debounce_ms=1000,
    )
    job.start_coordinator("coordinator-0")
    job.start_processor("a", "host-a")
    job.start_processor("b", "host-b")
    job.wait_for(job.settled, 60, "the first job model to settle")
    start = job.done_model()
    assert start is not None

    job.start_processor("c", "host-c")
    job.start_processor("d", "host-d")

    def balanced() -> bool:
        model = job.done_model()
        return (
            model is not None
            and job.settled()
            and sorted(len(c.tasks) for c in model.containers.values()) == [3, 3, 3, 3]
        )

    job.wait_for(balanced, 60, "the scale-out to converge")
    models = [m for m in done_models(job) if m.version >= start.version]
    steps = [len(moved(x, y)) for x, y in itertools.pairwise(models)]
    print("tasks moved per version:", steps)
    assert all(step <= 2 for step in steps), steps
    assert sum(steps) >= 6 and len(steps) >= 3  # 6 tasks to move, 2 at a time
    triggers = {e.version: e.trigger for e in job.store.history.read()}
    # The new processors' rebalance (two if they registered a debounce apart), then probes.
    seen = [triggers[m.version] for m in models[1:]]
    assert set(seen) == {"processors new", "probing"} and seen.count("probing") >= 1, seen
    assert seen.index("probing") > max(i for i, t in enumerate(seen) if t == "processors new")
    job.assert_no_task_ran_twice_at_once()


def test_standby_lag_reports_are_written_only_when_they_change(
    job_factory: type[JobHarness], zk_private_server: ZooKeeperServer
) -> None:
    job = job_factory(partitions=6, grouper_options={"standby_replicas": 1})
    job.start_coordinator("coordinator-0")
    job.start_processor("a", "host-a")
    client = connect(zk_private_server.hosts, session_timeout_s=4.0)
    store = ZkMetadataStore(client, "/affinity/clicks-1", run_id="r1")
    kept: dict[str, TaskModel] = {}

    def keep(_version: int, tasks: Mapping[str, TaskModel]) -> None:
        kept.update(tasks)

    def drop(_version: int | None, tasks: Mapping[str, TaskModel]) -> None:
        for name in tasks:
            kept.pop(name, None)

    processor = ProcessorClient(
        client,
        store,
        "b",
        "host-b",
        on_start=lambda v, t: None,
        on_stop=lambda v, t: None,
        on_start_standby=keep,
        on_stop_standby=drop,
        duplicate_wait_s=0,
    )
    stop = threading.Event()
    thread = threading.Thread(target=processor.run, args=(stop,), daemon=True)
    thread.start()
    try:
        job.wait_for(
            lambda: len(processor.standbys) == 3 and set(kept) == set(processor.standbys),
            30,
            "b to keep three standbys",
        )
        names = sorted(processor.standbys)
        assert set(kept) == set(names)
        reports = processor.group.standby_lag

        def stored() -> dict[str, int]:
            return job.store.standby_lag.read(["b"]).get("b", {})

        for task in names:
            processor.report_standby_lag(task, 500)
        job.wait_for(lambda: stored() == dict.fromkeys(names, 500), 10, "the first reports")
        assert reports.writes == 4  # b's folder and three entries
        ops = store.ops
        for _ in range(5):  # the same lags again: nothing is written
            for task in names:
                processor.report_standby_lag(task, 500)
        processor.report_standby_lag(names[0], 0)  # one change: one set
        job.wait_for(lambda: job.store.standby_lag.read(["b"])["b"][names[0]] == 0, 10, "0")
        # The writer counts its transaction once the answer is back, which may come after
        # another client already reads the new value.
        job.wait_for(lambda: store.ops - ops >= 1, 5, "the write to be counted")
        assert store.ops - ops == 1
        assert job.store.standby_lag.read(["b"]) == {
            "b": {**dict.fromkeys(names, 500), names[0]: 0}
        }
        path = f"/affinity/clicks-1/standbyLag/b/{names[1].replace(' ', '%20')}"
        assert job.store.client.get(path)[1].version == 0  # created once, never set again
    finally:
        stop.set()
        thread.join(15)
        client.stop()
        client.close()
