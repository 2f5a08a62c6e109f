"""groupers.validate and InvalidAssignment: every contract breach is caught and named."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupers import GrouperError, GrouperMetadata, InvalidAssignment, get_grouper, validate
from groupers.testing import GrouperInput, grouper_inputs
from metadata.model import ContainerModel, FrozenMap, SystemStreamPartition, TaskModel


def task(n: int, stream: str = "events") -> TaskModel:
    return TaskModel(f"Partition {n}", frozenset({SystemStreamPartition("kafka", stream, n)}), n)


TASKS = [task(n) for n in range(4)]
METADATA = GrouperMetadata(
    processor_locality={"p-1": "zone-a/host-1", "p-2": "host-2", "p-3": "host-3"},
    task_locality={},
    previous_task_to_processor={},
)


REGISTERED = object()


def container(pid: str, *numbers: int, location: object = REGISTERED) -> ContainerModel:
    """A container of ``pid`` with ``Partition n`` tasks, at its registered location by default."""
    where = METADATA.processor_locality[pid] if location is REGISTERED else location
    assert where is None or isinstance(where, str)
    return ContainerModel(pid, where, {f"Partition {n}": task(n) for n in numbers})


def valid_answer() -> set[ContainerModel]:
    return {container("p-1", 0, 1), container("p-2", 2), container("p-3", 3)}


def problems_of(containers: Any, tasks: list[TaskModel] = TASKS) -> list[str]:
    with pytest.raises(InvalidAssignment) as info:
        validate(tasks, METADATA, containers)
    error = info.value
    assert isinstance(error, GrouperError) and isinstance(error, ValueError)
    assert error.problems, "InvalidAssignment must list its problems"
    for problem in error.problems[:10]:
        assert problem in str(error)
    assert str(error).startswith("invalid assignment: ")
    return error.problems


def only_problem(containers: Any, tasks: list[TaskModel] = TASKS) -> str:
    problems = problems_of(containers, tasks)
    assert len(problems) == 1, problems
    return problems[0]


# ---------------------------------------------------------------- valid answers


def test_valid_answer_passes() -> None:
    validate(TASKS, METADATA, valid_answer())  # raises if invalid


def test_valid_answer_as_list_tuple_or_frozenset_passes() -> None:
    answer = valid_answer()
    validate(TASKS, METADATA, list(answer))
    validate(TASKS, METADATA, tuple(answer))
    validate(TASKS, METADATA, frozenset(answer))
    validate(iter(TASKS), METADATA, answer)  # tasks may be any iterable


def test_empty_containers_for_idle_processors_pass() -> None:
    validate([task(0)], METADATA, {container("p-1", 0), container("p-2"), container("p-3")})


def test_no_tasks_and_no_processors() -> None:
    empty = GrouperMetadata({}, {}, {})
    validate([], empty, set())
    validate([], METADATA, {container("p-1"), container("p-2"), container("p-3")})


def test_none_location_matches_nothing_but_equal_strings() -> None:
    metadata = GrouperMetadata({"p-1": "h"}, {}, {})
    validate([task(0)], metadata, {ContainerModel("p-1", "h", {"Partition 0": task(0)})})


# ---------------------------------------------------------------- each problem


def test_task_missing() -> None:
    problem = only_problem({container("p-1", 0, 1), container("p-2", 2), container("p-3")})
    assert "not assigned" in problem
    assert "'Partition 3'" in problem


def test_many_missing_tasks_are_summarised() -> None:
    tasks = [task(n) for n in range(12)]
    problem = only_problem({container("p-1"), container("p-2"), container("p-3")}, tasks)
    assert "not assigned" in problem
    assert "'Partition 0'" in problem
    assert "and 7 more" in problem


def test_task_twice() -> None:
    problem = only_problem({container("p-1", 0, 1), container("p-2", 2, 1), container("p-3", 3)})
    assert "'Partition 1'" in problem
    assert "twice" in problem
    assert "'p-1'" in problem and "'p-2'" in problem


def test_unknown_processor() -> None:
    answer = {container("p-1", 0, 1), container("p-2", 2), container("p-3")}
    answer.add(ContainerModel("p-9", "host-9", {"Partition 3": task(3)}))
    problem = only_problem(answer)
    assert "unknown processor 'p-9'" in problem


def test_task_not_asked_for() -> None:
    answer = valid_answer() - {container("p-3", 3)} | {container("p-3", 3, 7)}
    problem = only_problem(answer)
    assert "'Partition 7'" in problem
    assert "not asked for" in problem
    assert "'p-3'" in problem


def test_task_model_differs_from_request() -> None:
    changed = TaskModel("Partition 3", frozenset({SystemStreamPartition("kafka", "other", 3)}), 3)
    answer = {
        container("p-1", 0, 1),
        container("p-2", 2),
        ContainerModel("p-3", "host-3", {"Partition 3": changed}),
    }
    problem = only_problem(answer)
    assert "'Partition 3'" in problem
    assert "differs from the requested TaskModel" in problem


def test_task_model_with_other_changelog_partition_differs() -> None:
    changed = TaskModel("Partition 3", task(3).partitions, 99)
    answer = {
        container("p-1", 0, 1),
        container("p-2", 2),
        ContainerModel("p-3", "host-3", {"Partition 3": changed}),
    }
    assert "differs from the requested TaskModel" in only_problem(answer)


def test_live_processor_without_container() -> None:
    problem = only_problem({container("p-1", 0, 1), container("p-2", 2, 3)})
    assert "live processor 'p-3' has no container" in problem


def test_two_containers_for_one_processor() -> None:
    answer = [container("p-1", 0, 1), container("p-2", 2), container("p-3", 3), container("p-3")]
    problem = only_problem(answer)
    assert "processor 'p-3' has 2 containers" in problem


@pytest.mark.parametrize("location", ["host-9", None, "zone-a/host-3", ""])
def test_wrong_location_id(location: str | None) -> None:
    answer = {container("p-1", 0, 1), container("p-2", 2), container("p-3", 3, location=location)}
    problem = only_problem(answer)
    assert "'p-3'" in problem
    assert repr(location) in problem
    assert "'host-3'" in problem


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        (None, "NoneType"),
        (42, "int"),
        ("p-1", "str"),
        (b"p-1", "bytes"),
        ({"p-1": "x"}, "dict"),
        (FrozenMap({"p-1": container("p-1")}), "FrozenMap"),
        ((c for c in [container("p-1")]), "generator"),
        (container("p-1", 0), "ContainerModel"),
    ],
)
def test_not_a_collection(answer: Any, kind: str) -> None:
    problem = only_problem(answer)
    assert "expected a set of ContainerModel" in problem
    assert kind in problem


def test_items_that_are_not_container_models() -> None:
    answer: list[Any] = [*valid_answer(), "p-1", {"processor_id": "p-4"}, None]
    problems = problems_of(answer)
    assert sorted(p for p in problems if p.startswith("expected ContainerModel")) == [
        "expected ContainerModel, got NoneType",
        "expected ContainerModel, got dict",
        "expected ContainerModel, got str",
    ]
    assert len(problems) == 3


def test_several_problems_are_all_reported() -> None:
    answer = [
        container("p-1", 0, 1, location="elsewhere"),
        container("p-1", 1),
        ContainerModel("p-7", None, {"Partition 8": task(8)}),
    ]
    problems = problems_of(answer)
    text = " | ".join(problems)
    assert "unknown processor 'p-7'" in text
    assert "carries location 'elsewhere'" in text
    assert "'Partition 1' assigned twice" in text
    assert "'Partition 8'" in text and "not asked for" in text
    assert "processor 'p-1' has 2 containers" in text
    assert "live processor 'p-2' has no container" in text
    assert "live processor 'p-3' has no container" in text
    assert "'Partition 2'" in text and "'Partition 3'" in text  # not assigned


def test_more_than_ten_problems_are_capped_in_message() -> None:
    metadata = GrouperMetadata({f"p-{i:02}": "h" for i in range(15)}, {}, {})
    with pytest.raises(InvalidAssignment) as info:
        validate([], metadata, set())
    assert len(info.value.problems) == 15
    assert "(and 5 more)" in str(info.value)
    assert "'p-14'" not in str(info.value)


# ---------------------------------------------------------------- built-in groupers

BUILT_INS = ["host-affinity", "round-robin"]


def _without(answer: set[ContainerModel], name: str) -> set[ContainerModel]:
    return {
        ContainerModel(
            c.processor_id, c.location_id, {n: t for n, t in c.tasks.items() if n != name}
        )
        for c in answer
    }


@settings(max_examples=100)
@given(st.sampled_from(BUILT_INS), grouper_inputs(), st.data())
def test_builtin_answers_validate_and_removing_a_task_is_named(
    name: str, data: GrouperInput, choice: st.DataObject
) -> None:
    grouper = get_grouper(name)
    answer = grouper.group(data.tasks, data.metadata)
    validate(data.tasks, data.metadata, answer)
    assigned = sorted(n for c in answer for n in c.tasks)
    assert assigned == sorted(t.name for t in data.tasks)
    if not assigned:
        return
    removed = choice.draw(st.sampled_from(assigned))
    with pytest.raises(InvalidAssignment) as info:
        validate(data.tasks, data.metadata, _without(answer, removed))
    assert repr(removed) in str(info.value)
    assert info.value.problems == [f"task(s) not assigned: {removed!r}"]


@settings(max_examples=50)
@given(st.sampled_from(BUILT_INS), grouper_inputs(), st.data())
def test_builtin_answers_break_when_a_task_is_duplicated(
    name: str, data: GrouperInput, choice: st.DataObject
) -> None:
    answer = get_grouper(name).group(data.tasks, data.metadata)
    by_pid = {c.processor_id: c for c in answer}
    owners = {n: c.processor_id for c in answer for n in c.tasks}
    others = [(n, pid) for n in owners for pid in by_pid if pid != owners[n]]
    if not others:
        return
    task_name, target = choice.draw(st.sampled_from(sorted(others)))
    copied = by_pid[owners[task_name]].tasks[task_name]
    old = by_pid[target]
    by_pid[target] = ContainerModel(target, old.location_id, {**old.tasks, task_name: copied})
    with pytest.raises(InvalidAssignment) as info:
        validate(data.tasks, data.metadata, set(by_pid.values()))
    assert f"task {task_name!r} assigned twice" in str(info.value)
