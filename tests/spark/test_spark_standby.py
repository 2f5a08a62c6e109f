"""Standby replicas in the Spark runtime, on the real 3-worker cluster with ZooKeeper: copies kept
warm by applying each batch's delta on the standby's host; a killed worker's tasks resume warm at
their copies; a scale-out with warm-up moves tasks only once their copies report lag 0."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from affinity_pipeline import BatchReport, PipelineConfig, StatefulPipeline, reference_outputs
from affinity_pipeline.placement import JobModelPlacement, PlanStep
from affinity_pipeline.standby import StandbyStage, keep_standbys
from spark_app import WORKER_HOSTS, SparkApp

from coordinator.member.executors import ExecutorRegistrar
from metadata.zk import ZkMetadataStore

pytestmark = [pytest.mark.spark, pytest.mark.zk]

TASKS = 12
NEW_HOST = "127.0.0.5"


@dataclass
class Loop:
    """Plan, run the batch, keep the standbys, record; as the benchmark's driver does."""

    app: SparkApp
    store: ZkMetadataStore
    config: PipelineConfig
    options: dict[str, int]
    reference: dict[int, list[tuple[str, int, int]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.placement = JobModelPlacement(self.store, TASKS, grouper_options=self.options)
        self.registrar = ExecutorRegistrar.for_context(self.app.sc, self.store)
        self.pipeline = StatefulPipeline(self.app.sc, self.config)
        self.reference = reference_outputs(self.config, range(12))

    def batch(self) -> tuple[PlanStep, dict[str, dict[str, int]], BatchReport, StandbyStage]:
        self.registrar.sync()
        lags = self.store.standby_lag.read()  # what the plan sees
        step = self.placement.plan()
        report = self.pipeline.run_batch(self.registrar.placement(step.task_to_processor))
        stage = keep_standbys(
            self.pipeline, self.store, step.standby_copies, self.registrar, report.batch
        )
        self.placement.record(report.task_locality)
        assert report.outputs == self.reference[report.batch]
        return step, lags, report, stage


@pytest.fixture
def loop(app: SparkApp, store_dirs: tuple[str, str], zk_store: ZkMetadataStore) -> Iterator[Loop]:
    local, checkpoints = store_dirs
    config = PipelineConfig(local_store_dir=local, checkpoint_dir=checkpoints, num_tasks=TASKS)
    options = {"standby_replicas": 1, "max_warmup_replicas": 2, "acceptable_recovery_lag": 0}
    made = Loop(app, zk_store, config, options)
    try:
        yield made
    finally:
        made.registrar.close()


def _wait_hosts(app: SparkApp, hosts: set[str]) -> None:
    deadline = time.monotonic() + 120
    while {e.host for e in app.executors()} != hosts:
        assert time.monotonic() < deadline, app.executors()
        time.sleep(0.2)


def test_a_killed_workers_tasks_resume_warm_at_their_standby_copies(loop: Loop) -> None:
    app, lost = loop.app, WORKER_HOSTS[-1]
    for _ in range(3):
        step, _, report, stage = loop.batch()
    assert report.warm == TASKS and stage.pinned_ok == stage.pinned_total == TASKS
    assert stage.count("delta") == TASKS and stage.catchup_bytes == 0
    host_of = {pid: r.location_id for pid, r in loop.registrar.registrations.items()}
    standby_host = {t: host_of[p] for p, ts in step.standby_copies.items() for t in ts}
    on_lost = sorted(t for t, o in report.outcomes.items() if o.location == lost)
    assert on_lost and all(standby_host[t] != lost for t in on_lost)
    try:
        app.cluster.kill_worker(lost)
        _wait_hosts(app, set(WORKER_HOSTS) - {lost})
        step, _, report, stage = loop.batch()
        assert set(step.moved) >= set(on_lost)
        assert {t: report.outcomes[t].location for t in on_lost} == {
            t: standby_host[t] for t in on_lost
        }
        assert [t for t in on_lost if report.outcomes[t].status != "warm"] == []
        assert report.cold == 0 and report.bytes_restored == 0
        # the lost host's copies are made again on the two hosts left, from checkpoints
        assert stage.catchup_bytes > 0
        step, _, report, _ = loop.batch()
        assert report.cold == 0
    finally:
        app.cluster.start_worker(lost)
        app.ready()


def test_a_scale_out_with_warm_up_moves_tasks_only_to_caught_up_copies(loop: Loop) -> None:
    app = loop.app
    for _ in range(2):
        loop.batch()
    try:
        app.cluster.start_worker(NEW_HOST)
        _wait_hosts(app, {*WORKER_HOSTS, NEW_HOST})
        deferred, plans, moved_at = [], 0, {}
        for _ in range(6):
            step, lags, report, _ = loop.batch()
            assert report.cold == 0, [(t, o.location) for t, o in report.outcomes.items()]
            deferred.append(len(step.deferred))
            plans += step.new_version
            for task in step.moved:
                pid = step.task_to_processor[task]
                assert lags.get(pid, {}).get(task) == 0, (task, pid, lags)
                moved_at[task] = report.batch
            if not step.deferred and step.new_version is False and moved_at:
                break
        new = {t for t, o in report.outcomes.items() if o.location == NEW_HOST}
        assert len(new) == TASKS // 4, (deferred, moved_at)
        assert deferred[0] > 0 and deferred[-1] == 0, deferred
    finally:
        app.cluster.kill_worker(NEW_HOST)
        _wait_hosts(app, set(WORKER_HOSTS))
