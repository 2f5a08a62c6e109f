"""SSP groupers (groupers/ssp.py) through the registry: Samza names, shapes, purity, errors."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupers import GrouperError, UnknownGrouperError, get_ssp_grouper, ssp_grouper_names
from metadata.model import StreamInput, SystemStreamPartition, TaskModel

EVENTS = StreamInput("kafka", "events", 4)
CLICKS = StreamInput("kafka", "clicks", 6)


def by_name(tasks: set[TaskModel]) -> dict[str, TaskModel]:
    named = {t.name: t for t in tasks}
    assert len(named) == len(tasks), "task names must be unique"
    return named


def ssp(stream: str, n: int, system: str = "kafka") -> SystemStreamPartition:
    return SystemStreamPartition(system, stream, n)


# ---------------------------------------------------------------- registry


def test_builtin_ssp_grouper_names() -> None:
    assert ssp_grouper_names() == ["group-by-partition", "group-by-ssp"]
    for name in ssp_grouper_names():
        assert callable(get_ssp_grouper(name).group)


def test_unknown_ssp_grouper_lists_known_names() -> None:
    with pytest.raises(UnknownGrouperError) as info:
        get_ssp_grouper("group-by-nothing")
    message = str(info.value)
    assert "'group-by-nothing'" in message
    assert "group-by-partition" in message and "group-by-ssp" in message
    assert isinstance(info.value, GrouperError) and isinstance(info.value, LookupError)


def test_task_name_grouper_is_not_an_ssp_grouper() -> None:
    with pytest.raises(UnknownGrouperError):
        get_ssp_grouper("host-affinity")


@pytest.mark.parametrize("name", ["group-by-partition", "group-by-ssp"])
def test_unknown_option_is_named(name: str) -> None:
    with pytest.raises(GrouperError) as info:
        get_ssp_grouper(name, broadcast_streams="x")
    assert "broadcast_streams" in str(info.value)
    assert name in str(info.value)
    assert not isinstance(info.value, UnknownGrouperError)


# ---------------------------------------------------------------- group-by-partition


def test_group_by_partition_names_and_contents() -> None:
    tasks = get_ssp_grouper("group-by-partition").group([StreamInput("kafka", "events", 4)])
    assert tasks == {
        TaskModel(f"Partition {n}", frozenset({ssp("events", n)}), n) for n in range(4)
    }


def test_group_by_partition_two_inputs_of_different_width() -> None:
    tasks = by_name(get_ssp_grouper("group-by-partition").group([EVENTS, CLICKS]))
    assert sorted(tasks) == [f"Partition {n}" for n in range(6)]
    for n in range(4):
        assert tasks[f"Partition {n}"].partitions == {ssp("events", n), ssp("clicks", n)}
    assert tasks["Partition 4"].partitions == {ssp("clicks", 4)}
    assert tasks["Partition 5"].partitions == {ssp("clicks", 5)}
    for n in range(6):
        assert tasks[f"Partition {n}"].changelog_partition == n
    for t in tasks.values():
        assert all(p.key_bucket == -1 for p in t.partitions)


def test_group_by_partition_same_stream_name_in_two_systems() -> None:
    inputs = [StreamInput("kafka", "events", 2), StreamInput("kinesis", "events", 1)]
    tasks = by_name(get_ssp_grouper("group-by-partition").group(inputs))
    assert tasks["Partition 0"].partitions == {ssp("events", 0), ssp("events", 0, "kinesis")}
    assert tasks["Partition 1"].partitions == {ssp("events", 1)}


# ---------------------------------------------------------------- group-by-ssp


def test_group_by_ssp_names_follow_samza() -> None:
    tasks = by_name(get_ssp_grouper("group-by-ssp").group([StreamInput("kafka", "events", 4)]))
    assert "SystemStreamPartition [kafka, events, 3]" in tasks
    assert tasks["SystemStreamPartition [kafka, events, 3]"].partitions == {ssp("events", 3)}
    assert sorted(tasks) == [f"SystemStreamPartition [kafka, events, {n}]" for n in range(4)]


def test_group_by_ssp_one_task_per_stream_partition() -> None:
    tasks = get_ssp_grouper("group-by-ssp").group([EVENTS, CLICKS])
    assert len(tasks) == 10
    every = [p for t in tasks for p in t.partitions]
    assert all(len(t.partitions) == 1 for t in tasks)
    assert sorted(every) == sorted(
        [ssp("events", n) for n in range(4)] + [ssp("clicks", n) for n in range(6)]
    )
    for t in tasks:
        (only,) = t.partitions
        assert t.name == f"SystemStreamPartition [{only.system}, {only.stream}, {only.partition}]"
    # Changelog partitions number the tasks in sorted SSP order: 0..9, each once.
    changelog = {next(iter(t.partitions)): t.changelog_partition for t in tasks}
    assert [changelog[s] for s in sorted(changelog)] == list(range(10))


# ---------------------------------------------------------------- both


@pytest.mark.parametrize("name", ["group-by-partition", "group-by-ssp"])
def test_empty_inputs_give_no_tasks(name: str) -> None:
    assert get_ssp_grouper(name).group([]) == set()


@pytest.mark.parametrize("name", ["group-by-partition", "group-by-ssp"])
def test_duplicate_input_is_rejected(name: str) -> None:
    with pytest.raises(GrouperError) as info:
        get_ssp_grouper(name).group([EVENTS, CLICKS, StreamInput("kafka", "events", 9)])
    assert "kafka.events" in str(info.value)
    assert "twice" in str(info.value)


@pytest.mark.parametrize("name", ["group-by-partition", "group-by-ssp"])
@pytest.mark.parametrize(
    ("item", "kind"),
    [
        (("kafka", "events", 4), "tuple"),
        ({"system": "kafka", "stream": "events", "partitions": 4}, "dict"),
        ("kafka.events", "str"),
        (None, "NoneType"),
        (SystemStreamPartition("kafka", "events", 0), "SystemStreamPartition"),
    ],
)
def test_non_stream_input_is_rejected(name: str, item: Any, kind: str) -> None:
    with pytest.raises(GrouperError) as info:
        get_ssp_grouper(name).group([EVENTS, item])
    assert "expected StreamInput" in str(info.value)
    assert kind in str(info.value)


stream_inputs = st.lists(
    st.builds(
        StreamInput,
        system=st.sampled_from(["kafka", "kinesis", "k"]),
        stream=st.text(min_size=1, max_size=6),
        partitions=st.integers(1, 12),
    ),
    max_size=5,
    unique_by=lambda i: (i.system, i.stream),
)


@settings(max_examples=150)
@given(st.sampled_from(["group-by-partition", "group-by-ssp"]), stream_inputs, st.randoms())
def test_results_independent_of_input_order(name: str, inputs: list[StreamInput], rng: Any) -> None:
    grouper = get_ssp_grouper(name)
    first = grouper.group(inputs)
    shuffled = list(inputs)
    rng.shuffle(shuffled)
    assert grouper.group(shuffled) == first
    assert grouper.group(tuple(reversed(inputs))) == first
    assert get_ssp_grouper(name).group(set(inputs)) == first


@settings(max_examples=150)
@given(st.sampled_from(["group-by-partition", "group-by-ssp"]), stream_inputs)
def test_every_partition_once_and_changelogs_distinct(name: str, inputs: list[StreamInput]) -> None:
    tasks = get_ssp_grouper(name).group(inputs)
    by_name(tasks)  # unique names
    every = [p for t in tasks for p in t.partitions]
    expected = {
        SystemStreamPartition(i.system, i.stream, n) for i in inputs for n in range(i.partitions)
    }
    assert len(every) == len(expected)
    assert set(every) == expected
    changelogs = [t.changelog_partition for t in tasks]
    assert len(set(changelogs)) == len(changelogs)
    assert sorted(changelogs) == list(range(len(tasks)))
    if name == "group-by-partition":
        width = max((i.partitions for i in inputs), default=0)
        assert len(tasks) == width
        for t in tasks:
            assert t.name == f"Partition {t.changelog_partition}"
            assert {p.partition for p in t.partitions} == {t.changelog_partition}
            assert len(t.partitions) == sum(
                1 for i in inputs if i.partitions > t.changelog_partition
            )
    else:
        assert len(tasks) == len(expected)
