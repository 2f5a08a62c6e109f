"""The elastic pipeline's pure parts, and its task function run in-process across 8 -> 16 -> 8.

The same task function runs on a real Spark cluster in tests/spark/test_rescaling_pipeline.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from affinity_pipeline.events import generate_batch, reference_outputs
from affinity_pipeline.rescaling import (
    ElasticConfig,
    ElasticInput,
    elastic_tasks,
    process_elastic_task,
    slot_of,
    split_events,
    task_slots,
)
from hypothesis import given
from hypothesis import strategies as st

from groupers.keys import key_bucket
from locality.spark import EXECUTOR_LOCATION_ENV

CONFIG = ElasticConfig("/unused", "/unused", partitions=4, groups_per_partition=16)


@given(st.sampled_from([1, 2, 4, 8]))
def test_the_tasks_slots_partition_every_slot_exactly_once(factor: int) -> None:
    owned = [s for t in elastic_tasks(CONFIG, factor) for s in task_slots(t, factor, CONFIG)]
    assert sorted(owned) == list(range(CONFIG.slots))


@given(st.sampled_from([1, 2, 4]))
def test_children_split_their_parents_slots(factor: int) -> None:
    parents = {t.name: set(task_slots(t, factor, CONFIG)) for t in elastic_tasks(CONFIG, factor)}
    for child in elastic_tasks(CONFIG, 2 * factor):
        slots = set(task_slots(child, 2 * factor, CONFIG))
        assert sum(1 for p in parents.values() if slots <= p) == 1
        assert all(not slots & p or slots <= p for p in parents.values())


@given(st.lists(st.text(min_size=1, max_size=12), max_size=40), st.sampled_from([1, 2, 4]))
def test_each_event_goes_to_the_task_owning_its_slot(keys: list[str], factor: int) -> None:
    by_task = split_events(((k, 1) for k in keys), factor, CONFIG)
    tasks = {t.name: t for t in elastic_tasks(CONFIG, factor)}
    for name, events in by_task.items():
        slots = set(task_slots(tasks[name], factor, CONFIG))
        for key, _ in events:
            assert slot_of(key, CONFIG) in slots
            (ssp,) = tasks[name].partitions
            assert key_bucket(key, factor) == max(ssp.key_bucket, 0)
    assert sum(len(e) for e in by_task.values()) == len(keys)


def test_a_bad_factor_is_refused() -> None:
    with pytest.raises(ValueError, match="power of two"):
        elastic_tasks(CONFIG, 3)
    with pytest.raises(ValueError, match="exceeds"):
        elastic_tasks(CONFIG, 32)


def test_rescaling_8_16_8_in_process_matches_the_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tasks run at three locations by a fixed rule; a task that changes location is cold for
    the slots it finds nowhere locally, and the outputs equal the single-process reference."""
    config = ElasticConfig(str(tmp_path / "local"), str(tmp_path / "ckpt"), partitions=8)
    factors = [1, 1, 2, 2, 1, 1]
    reference = reference_outputs(config.events, range(len(factors)))
    cold_total = 0
    for batch, factor in enumerate(factors):
        events = split_events(generate_batch(batch, config.events), factor, config)
        rows = []
        for task in elastic_tasks(config, factor):
            (ssp,) = task.partitions
            location = f"host-{(ssp.partition + max(ssp.key_bucket, 0)) % 3}"
            monkeypatch.setenv(EXECUTOR_LOCATION_ENV, location)
            outcome = process_elastic_task(
                task.name,
                ElasticInput(
                    config,
                    batch,
                    batch,
                    factor,
                    tuple(task_slots(task, factor, config)),
                    tuple(events[task.name]),
                ),
            )
            rows.extend(outcome.outputs)
            cold_total += len(outcome.cold_slots)
            if batch and factor == factors[batch - 1]:
                assert not outcome.cold_slots  # same task, same location: warm
        assert sorted(rows) == reference[batch], batch
    assert cold_total > 0  # the rule moved some children: they were restored, and still exact


def test_a_task_refuses_an_offset_that_is_not_its_batch(tmp_path: Path) -> None:
    config = ElasticConfig(str(tmp_path / "local"), str(tmp_path / "ckpt"))
    with pytest.raises(RuntimeError, match="offset is 3, the batch is 4"):
        process_elastic_task("Partition 0", ElasticInput(config, 4, 3, 1, (0,), ()))
