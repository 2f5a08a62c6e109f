"""The replicas contract (issue 13): standby validity in groupers.validate, the new
GrouperMetadata fields, and the host-affinity options."""

from __future__ import annotations

import pytest

from groupers import GrouperError, GrouperMetadata, InvalidAssignment, get_grouper, validate
from metadata.model import ContainerModel, FrozenMap, SystemStreamPartition, TaskModel


def task(n: int) -> TaskModel:
    return TaskModel(f"Partition {n}", frozenset({SystemStreamPartition("kafka", "events", n)}), n)


TASKS = [task(n) for n in range(2)]
METADATA = GrouperMetadata({"p-1": "zone-a/h1", "p-2": "zone-b/h2"}, {}, {})


def answer(
    standbys_1: dict[str, TaskModel], standbys_2: dict[str, TaskModel]
) -> set[ContainerModel]:
    return {
        ContainerModel("p-1", "zone-a/h1", {"Partition 0": TASKS[0]}, standbys_1),
        ContainerModel("p-2", "zone-b/h2", {"Partition 1": TASKS[1]}, standbys_2),
    }


def problems(containers: set[ContainerModel]) -> list[str]:
    with pytest.raises(InvalidAssignment) as caught:
        validate(TASKS, METADATA, containers)
    return caught.value.problems


def test_valid_standbys_pass() -> None:
    validate(TASKS, METADATA, answer({"Partition 1": TASKS[1]}, {"Partition 0": TASKS[0]}))


def test_standby_on_its_active_processor_is_named() -> None:
    assert problems(answer({"Partition 0": TASKS[0]}, {})) == [
        "task 'Partition 0' has a standby on its active processor 'p-1'"
    ]


def test_standby_of_a_task_not_asked_for_is_named() -> None:
    assert problems(answer({"Partition 7": task(7)}, {})) == [
        "standby of task 'Partition 7' on 'p-1' was not asked for"
    ]


def test_standby_that_differs_from_the_task_model_is_named() -> None:
    other = TaskModel("Partition 1", frozenset(), 9)
    assert problems(answer({"Partition 1": other}, {})) == [
        "standby of task 'Partition 1' on 'p-1' differs from the TaskModel"
    ]


def test_container_standby_key_must_match_name() -> None:
    with pytest.raises(ValueError, match="standby task key"):
        ContainerModel("p-1", None, {}, {"x": TASKS[0]})


def test_containers_with_standbys_are_frozen_and_hashable() -> None:
    first = ContainerModel("p-1", None, {}, {"Partition 0": TASKS[0]})
    again = ContainerModel("p-1", None, {}, FrozenMap({"Partition 0": TASKS[0]}))
    assert first == again and hash(first) == hash(again)
    assert isinstance(first.standby_tasks, FrozenMap)
    assert ContainerModel("p-1", None).standby_tasks == {}


def test_metadata_defaults_and_freezing() -> None:
    assert METADATA.processor_capacity == {} and METADATA.task_state == {}
    assert METADATA.capacity("p-1") == 1
    md = GrouperMetadata({"p-1": "h"}, {}, {}, {}, {"p-1": 4}, {"Partition 0": {"p-1": 3}})
    assert md.capacity("p-1") == 4
    assert isinstance(md.task_state["Partition 0"], FrozenMap)
    assert hash(md) == hash(
        GrouperMetadata({"p-1": "h"}, {}, {}, {}, {"p-1": 4}, {"Partition 0": {"p-1": 3}})
    )


@pytest.mark.parametrize("capacity", [0, -1, True, 1.5, "2"])
def test_bad_capacity_is_named(capacity: object) -> None:
    with pytest.raises(GrouperError, match="processor_capacity of 'p-1' must be an integer >= 1"):
        GrouperMetadata({"p-1": "h"}, {}, {}, processor_capacity={"p-1": capacity})  # type: ignore[dict-item]


def test_new_options_are_accepted_with_their_defaults() -> None:
    grouper = get_grouper(
        "host-affinity",
        standby_replicas=0,
        max_warmup_replicas=0,
        acceptable_recovery_lag=0,
        max_moves_per_rebalance=None,
    )
    assert grouper == get_grouper("host-affinity")
    get_grouper("host-affinity", standby_replicas=2, max_moves_per_rebalance=5)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("standby_replicas", -1),
        ("standby_replicas", "1"),
        ("standby_replicas", True),
        ("max_warmup_replicas", -2),
        ("acceptable_recovery_lag", 1.5),
        ("max_moves_per_rebalance", 0),
        ("max_moves_per_rebalance", "3"),
    ],
)
def test_bad_option_values_are_named(option: str, value: object) -> None:
    with pytest.raises(GrouperError, match=f"^{option} must be"):
        get_grouper("host-affinity", **{option: value})


def test_unknown_option_is_named() -> None:
    with pytest.raises(GrouperError, match="standby_replica"):
        get_grouper("host-affinity", standby_replica=1)
