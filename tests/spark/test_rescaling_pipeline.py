"""The elastic pipeline on the real 3-worker Spark cluster with ZooKeeper: 8 -> 16 -> 8 tasks
while the application runs, output equal to the reference, state kept local where it could be."""

from __future__ import annotations

import pytest
from affinity_pipeline.events import reference_outputs
from affinity_pipeline.rescaling import (
    ElasticBatch,
    ElasticConfig,
    ElasticPipeline,
    elastic_tasks,
    task_slots,
)
from spark_app import SparkApp

from coordinator.member.executors import ExecutorRegistrar
from metadata.zk import ZkMetadataStore

pytestmark = [pytest.mark.spark, pytest.mark.zk]

FACTORS = [1, 1, 2, 2, 1, 1]


def slots_by_task(config: ElasticConfig, factor: int) -> dict[str, set[int]]:
    return {t.name: set(task_slots(t, factor, config)) for t in elastic_tasks(config, factor)}


def host_by_slot(config: ElasticConfig, batch: ElasticBatch) -> dict[int, str]:
    owned = slots_by_task(config, batch.factor)
    return {s: batch.outcomes[t].location for t, slots in owned.items() for s in slots}


def test_rescale_8_16_8_while_running(
    app: SparkApp, store_dirs: tuple[str, str], zk_store: ZkMetadataStore
) -> None:
    config = ElasticConfig(*store_dirs, partitions=8)
    reference = reference_outputs(config.events, range(len(FACTORS)))
    registrar = ExecutorRegistrar.for_context(app.sc, zk_store)
    pipeline = ElasticPipeline(app.sc, config, zk_store, registrar)
    batches: list[ElasticBatch] = []
    for factor in FACTORS:
        pipeline.rescale(factor)
        batches.append(pipeline.run_batch())
    registrar.close()
    for batch in batches:  # shown with -s: the figures the docs quote
        cold = sum(len(o.cold_slots) for o in batch.outcomes.values())
        print(
            f"batch {batch.batch}: {len(batch.outcomes)} tasks, cold slots {cold}/{config.slots},"
            f" restored {batch.bytes_restored} B, checkpoint {batch.checkpoint_bytes} B"
            f" (full snapshot {batch.full_snapshot_bytes} B), {batch.seconds:.2f} s"
        )

    for batch in batches:
        assert batch.outputs == reference[batch.batch], batch.batch
        assert len(batch.outcomes) == 8 * batch.factor
        assert set(batch.resume_offsets.values()) == {batch.batch}  # offsets from ZooKeeper
        assert batch.ran_on == dict(batch.placement), batch.batch  # every task where placed
    for steady in (batches[1], batches[3], batches[5]):  # same tasks as the batch before
        assert all(not o.cold_slots for o in steady.outcomes.values())
        assert steady.bytes_restored == 0

    # The split (batch 2): a child runs where its parent's state is unless balance forbids it.
    # 8 parents on 3 hosts (3/3/2) have 6/6/4 children; 16 tasks balance as 6/5/5, so exactly
    # one child must move.
    split, before = batches[2], batches[1]
    where_before = host_by_slot(config, before)
    moved_children = []
    for name, slots in slots_by_task(config, 2).items():
        outcome = split.outcomes[name]
        parent_hosts = {where_before[s] for s in slots}
        assert len(parent_hosts) == 1
        if outcome.location in parent_hosts:
            assert not outcome.cold_slots and outcome.bytes_restored == 0  # warm: local state
        else:
            moved_children.append(name)
            assert set(outcome.cold_slots) == slots and outcome.bytes_restored > 0
    assert len(moved_children) <= 1, moved_children

    # The merge (batch 4): a merged task runs where at least half of its state is; only the
    # slots of a parent on another host are restored.
    merge, before = batches[4], batches[3]
    where_before = host_by_slot(config, before)
    for name, slots in slots_by_task(config, 1).items():
        outcome = merge.outcomes[name]
        local = {s for s in slots if where_before[s] == outcome.location}
        assert len(local) * 2 >= len(slots), name
        assert set(outcome.cold_slots) == slots - local
        assert (outcome.bytes_restored > 0) == bool(slots - local)
    restored_share = sum(len(o.cold_slots) for o in merge.outcomes.values()) / config.slots
    assert restored_share <= 0.5
