"""The reference pipeline: output equal to the single-process reference whatever the placement,
after executor loss and after an application restart; warm state where the job model sends tasks.
"""

from __future__ import annotations

import threading
import time
import zlib
from pathlib import Path

import pytest
from affinity_pipeline import (
    PipelineConfig,
    StatefulPipeline,
    generate_batch,
    reference_outputs,
    split_by_task,
    task_names,
    task_of_key,
)
from affinity_pipeline.placement import JobModelPlacement
from affinity_pipeline.store import TaskStore
from spark_app import SparkApp

from coordinator.member.executors import ExecutorRegistrar
from locality.spark import SparkExecutor
from metadata.zk import ZkMetadataStore

pytestmark = pytest.mark.spark

TASKS = 12


def _config(store_dirs: tuple[str, str], **overrides: float) -> PipelineConfig:
    local, checkpoints = store_dirs
    return PipelineConfig(
        local_store_dir=local, checkpoint_dir=checkpoints, num_tasks=TASKS, **overrides
    )


def _spread(executors: list[SparkExecutor]) -> dict[str, str]:
    return {
        task: executors[i % len(executors)].executor_id for i, task in enumerate(task_names(TASKS))
    }


# ---------------------------------------------------------------- no Spark needed


def test_the_input_is_deterministic_and_split_by_a_stable_hash() -> None:
    config = PipelineConfig(local_store_dir="unused", checkpoint_dir="unused", num_tasks=TASKS)
    assert generate_batch(3, config) == generate_batch(3, config)
    assert generate_batch(3, config) != generate_batch(4, config)
    assert task_of_key("key-042", TASKS) == f"Partition {zlib.crc32(b'key-042') % TASKS}"
    by_task = split_by_task(generate_batch(0, config), TASKS)
    assert list(by_task) == task_names(TASKS)
    assert sum(len(events) for events in by_task.values()) == config.events_per_batch
    reference = reference_outputs(config, range(3))
    counts = {key: count for key, count, _ in reference[2]}
    assert all(count >= 1 for count in counts.values())


def test_a_task_store_is_warm_at_its_location_and_cold_elsewhere(tmp_path: Path) -> None:
    def store(location: str) -> TaskStore:
        return TaskStore(
            "Partition 1",
            local_store_dir=tmp_path / "local",
            checkpoint_dir=tmp_path / "ckpt",
            location=location,
        )

    here, there = store("zone-a/127.0.0.2"), store("127.0.0.3")
    assert here.load(-1).status == "new"
    size0 = here.save(0, {"k": [1, 5]})
    here.save(1, {"k": [2, 9]})
    warm = here.load(1)
    assert (warm.status, warm.bytes_restored, warm.state) == ("warm", 0, {"k": [2, 9]})
    cold = there.load(1)  # another host: no local state there
    assert cold.status == "cold" and cold.bytes_restored > 0 and cold.state == {"k": [2, 9]}
    retry = here.load(0)  # a retry of batch 1 starts again from the checkpoint of batch 0
    assert (retry.status, retry.bytes_restored, retry.state) == ("cold", size0, {"k": [1, 5]})
    here.save(2, {"k": [3, 10]})
    assert sorted(p.name for p in here.checkpoint_folder.iterdir()) == [
        "00000001.json",
        "00000002.json",
    ]
    assert here.local_path.parent.parent.name == "zone-a%2F127.0.0.2"


# ---------------------------------------------------------------- on the cluster


def test_output_equals_the_reference_with_pinned_and_with_default_placement(
    app: SparkApp, tmp_path: Path
) -> None:
    pinned = StatefulPipeline(app.sc, _config((str(tmp_path / "a1"), str(tmp_path / "a2"))))
    default = StatefulPipeline(app.sc, _config((str(tmp_path / "d1"), str(tmp_path / "d2"))))
    reference = reference_outputs(pinned.config, range(4))
    placement = _spread(app.executors())
    for batch in range(4):
        report = pinned.run_batch(placement)
        assert report.batch == batch and report.outputs == reference[batch]
        assert report.pinned_ok == report.pinned_total == TASKS
        assert report.ran_on == placement
        if batch > 0:
            assert (report.warm, report.cold, report.bytes_restored) == (TASKS, 0, 0)
        baseline = default.run_batch(None)
        assert baseline.outputs == reference[batch]
        assert baseline.pinned_total == 0
    assert pinned.committed_batch == 3


def test_output_equals_the_reference_when_an_executor_dies_during_a_batch(
    app: SparkApp, store_dirs: tuple[str, str]
) -> None:
    config = _config(store_dirs, task_delay_s=0.25)
    pipeline = StatefulPipeline(app.sc, config, locality_wait="2s")
    reference = reference_outputs(config, range(4))
    executors = app.executors()
    placement = _spread(executors)
    assert pipeline.run_batch(placement).outputs == reference[0]
    assert pipeline.run_batch(placement).outputs == reference[1]

    victim = executors[1]
    reports = []
    batch = threading.Thread(target=lambda: reports.append(pipeline.run_batch(placement)))
    batch.start()
    time.sleep(0.5)  # the batch's first tasks are running
    app.cluster.kill_executor(app.app_id, victim.executor_id)
    batch.join(timeout=120)
    assert not batch.is_alive() and reports
    hit = reports[0]
    assert hit.outputs == reference[2]
    # The victim's unfinished tasks ran again elsewhere (results it had sent are kept).
    assert [t for t, e in placement.items() if e == victim.executor_id and hit.ran_on[t] != e]

    # The replacement (new id, same host) gets the victim's tasks back: state is there.
    replaced = {e.host: e.executor_id for e in app.ready(exclude=(victim.executor_id,))}
    host_of = {e.executor_id: e.host for e in executors}
    after = pipeline.run_batch({t: replaced[host_of[e]] for t, e in placement.items()})
    assert after.outputs == reference[3]
    assert after.pinned_ok == after.pinned_total == TASKS


def test_job_model_placement_keeps_tasks_warm_across_executor_loss_and_app_restart(
    app: SparkApp, store_dirs: tuple[str, str], zk_store: ZkMetadataStore
) -> None:
    """The whole loop: executors registered in ZooKeeper, job models from the host-affinity
    grouper, task locality written after each batch; then an executor dies between batches and
    the application restarts. Output stays exact; with the job model, state stays warm."""
    config = _config(store_dirs)
    reference = reference_outputs(config, range(8))
    placement = JobModelPlacement(zk_store, TASKS)
    reports = []

    def run(pipeline: StatefulPipeline, registrar: ExecutorRegistrar) -> None:
        registrar.sync()
        step = placement.plan()
        report = pipeline.run_batch(registrar.placement(step.task_to_processor))
        placement.record(report.task_locality)
        assert report.outputs == reference[report.batch]
        assert report.pinned_ok == report.pinned_total == TASKS
        reports.append(report)

    registrar = ExecutorRegistrar.for_context(app.sc, zk_store)
    pipeline = StatefulPipeline(app.sc, config)
    for _ in range(3):
        run(pipeline, registrar)
    assert placement.version == 0  # nothing changed: no new job model

    victim = app.executors()[0]
    app.cluster.kill_executor(app.app_id, victim.executor_id)
    app.ready(exclude=(victim.executor_id,))
    run(pipeline, registrar)  # a new model: the replacement takes the victim's tasks, warm
    assert placement.version == 1
    registrar.close()

    app.restart()  # a new application: new executors, new processor ids; ZooKeeper remembers
    registrar = ExecutorRegistrar.for_context(app.sc, zk_store)
    pipeline = StatefulPipeline(app.sc, config)
    assert pipeline.next_batch == 4
    for _ in range(4):
        run(pipeline, registrar)
    registrar.close()

    assert [r.batch for r in reports] == list(range(8))
    warm = sum(r.warm for r in reports[1:])
    cold = sum(r.cold for r in reports[1:])
    assert warm / (warm + cold) >= 0.99, [(r.batch, r.warm, r.cold) for r in reports]
    assert sum(r.bytes_restored for r in reports) == 0
