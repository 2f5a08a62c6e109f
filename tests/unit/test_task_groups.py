"""The pinned Kafka source's input partitions as a job's tasks, without Spark: each grouped
partition (``affinity.tasksPerPartition``) is one task's (every topic's partition p, key bucket
b), the placement names each task's group, a topic-partition's ranges merge over splits and
copies, and a batch whose partitions are not one per task is refused naming the option."""

from __future__ import annotations

import pytest

from coordinator.streaming.kafka_layout import KafkaLayout, KafkaLayoutError
from coordinator.streaming.kafka_stage import partition_tasks, placement
from coordinator.streaming.query import largest_task_rows
from groupers import get_ssp_grouper
from locality.spark.kafka import KafkaPartition
from locality.spark.kafka_source import PartitionGroup, merge_ranges, parse_key, placement_key
from metadata.model import StreamInput


def layout(partitions: int, factor: int, topics: tuple[str, ...] = ("a", "b")) -> KafkaLayout:
    grouper = get_ssp_grouper("group-by-partition", elasticity_factor=factor)
    tasks = grouper.group([StreamInput("kafka", t, partitions) for t in topics])
    return KafkaLayout.of(tasks, topics, partitions, max_parallelism=64)


def test_each_group_is_one_task_of_every_topic_and_bucket() -> None:
    virtual = layout(2, 2)
    groups = [PartitionGroup(p, b, 2) for p in range(2) for b in range(2)]
    assert partition_tasks(virtual, groups) == (
        "Partition 0-0-2",
        "Partition 0-1-2",
        "Partition 1-0-2",
        "Partition 1-1-2",
    )
    # a partition with nothing new has no group: its tasks run on empty partitions (not here)
    assert partition_tasks(virtual, groups[2:]) == ("Partition 1-0-2", "Partition 1-1-2")
    plain = layout(3, 1, ("a",))
    assert partition_tasks(plain, [PartitionGroup(2, 0, 1)]) == ("Partition 2",)
    assert partition_tasks(plain, [KafkaPartition("a", 1)]) == ("Partition 1",)  # no option


@pytest.mark.parametrize(
    ("tasks", "partitions"),
    [
        (layout(2, 1), [KafkaPartition("a", 0), KafkaPartition("b", 0)]),  # two topics
        (layout(2, 2, ("a",)), [KafkaPartition("a", 0), KafkaPartition("a", 1)]),  # buckets
        (layout(2, 1, ("a",)), [KafkaPartition("a", 0), KafkaPartition("a", 0)]),  # splits
        (layout(2, 4, ("a",)), [PartitionGroup(0, 0, 2), PartitionGroup(0, 1, 2)]),  # factor
        (layout(2, 1, ("a",)), [None]),  # a union
    ],
)
def test_partitions_not_one_per_task_are_refused_naming_the_option(
    tasks: KafkaLayout, partitions: list[KafkaPartition | PartitionGroup | None]
) -> None:
    option = rf'\.option\("affinity\.tasksPerPartition", {tasks.factor}\)'
    with pytest.raises(KafkaLayoutError, match=option):
        partition_tasks(tasks, partitions)


def test_a_refusal_names_a_few_of_the_partitions() -> None:
    many = [KafkaPartition("a", p) for p in range(3)] * 3
    with pytest.raises(KafkaLayoutError, match=r"'a-0', '\.\.\. 5 more'\]"):
        partition_tasks(layout(3, 1), many)


def test_the_placement_names_each_task_group_and_without_buckets_its_partitions() -> None:
    location = {"Partition 0-0-2": "e1", "Partition 0-1-2": "e2"}
    virtual = KafkaLayout(("a",), 1, 2, {"Partition 0-0-2": (0, 0), "Partition 0-1-2": (0, 1)})
    assert placement(virtual, location) == {
        PartitionGroup(0, 0, 2): "e1",
        PartitionGroup(0, 1, 2): "e2",
    }
    plain = KafkaLayout(("a", "b"), 1, 1, {"Partition 0": (0, 0)})
    assert placement(plain, {"Partition 0": "e3"}) == {
        PartitionGroup(0, 0, 1): "e3",
        KafkaPartition("a", 0): "e3",
        KafkaPartition("b", 0): "e3",
    }


def test_keys_read_back_and_ranges_merge_over_splits_and_copies() -> None:
    for part in (KafkaPartition("my.topic-1", 3), PartitionGroup(3, 1, 4)):
        assert parse_key(placement_key(part)) == part
    assert placement_key(PartitionGroup(3, 1, 4)) == "@3:1:4"
    entries = ["a:0:10:15,b:0:4:9", "a:0:10:15,b:0:4:9", "a:1:0:5", "a:1:5:8", None]
    assert merge_ranges(entries) == {
        KafkaPartition("a", 0): (10, 15),
        KafkaPartition("b", 0): (4, 9),
        KafkaPartition("a", 1): (0, 8),
    }
    assert largest_task_rows(merge_ranges(entries)) == 10  # partition 0: 5 of a, 5 of b
    assert largest_task_rows({}) == 0
