"""The shared protocol rules: who loses a task, the early-join rule, the model in force and the
retention floor (pure functions, checked on examples and with hypothesis)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coordinator.protocol.rules import (
    container_unchanged,
    gaining_processors,
    keeps_everything,
    losing_processors,
    model_in_force,
    retention_floor,
)
from metadata.model import (
    BarrierState,
    ContainerModel,
    FrozenMap,
    JobModel,
    SystemStreamPartition,
    TaskModel,
)


def test_losing_processors_are_those_that_do_not_keep_every_task() -> None:
    def t(i: int, changelog: int = -1) -> TaskModel:
        ssp = SystemStreamPartition("k", "s", i)
        return TaskModel(f"Partition {i}", frozenset({ssp}), changelog)

    def m(version: int, assignment: dict[str, list[TaskModel]]) -> JobModel:
        return JobModel(
            version,
            FrozenMap(
                {
                    pid: ContainerModel(pid, None, FrozenMap({x.name: x for x in tasks}))
                    for pid, tasks in assignment.items()
                }
            ),
        )

    before = m(1, {"a": [t(0), t(1)], "b": [t(2)], "c": [t(3)], "d": []})
    after = m(2, {"a": [t(0), t(1), t(4)], "b": [t(2, changelog=7)], "e": [t(3)], "d": [t(5)]})
    # a keeps all (and gains); b's task changed; c is gone; d had nothing to lose.
    assert losing_processors(before, after) == {"b", "c"}
    # a gains 4; b's task changed; e and d get a task: c lost its only one and is gone.
    assert gaining_processors(before, after) == {"a", "b", "d", "e"}
    assert gaining_processors(before, before) == frozenset()


def test_the_early_join_rule_needs_the_base_and_no_loss() -> None:
    assert keeps_everything("p-1", 2, base=2, losing={"p-2"})
    assert not keeps_everything("p-2", 2, base=2, losing={"p-2"})  # loses a task
    assert not keeps_everything("p-1", 1, base=2, losing=())  # runs another version
    assert not keeps_everything("p-1", None, base=2, losing=())  # runs nothing yet
    assert not keeps_everything("p-1", 2, base=None, losing=())  # no plan: no promise


def test_an_unchanged_container_needs_the_early_join_rule_and_no_gain() -> None:
    assert container_unchanged("p-1", 2, base=2, losing=(), gaining={"p-2"})
    assert not container_unchanged("p-1", 2, base=2, losing=(), gaining={"p-1"})  # gains
    assert not container_unchanged("p-1", 2, base=2, losing=(), gaining=None)  # not said
    assert not container_unchanged("p-1", 2, base=2, losing={"p-1"}, gaining=())  # loses
    assert not container_unchanged("p-1", 1, base=2, losing=(), gaining=())  # another version


def test_the_model_in_force_is_the_newest_done() -> None:
    done, timed_out, new = BarrierState.DONE, BarrierState.TIMED_OUT, BarrierState.NEW
    assert model_in_force({5: done, 6: timed_out, 7: new}) == 5
    assert model_in_force({5: timed_out, 6: None}) is None
    assert model_in_force({}) is None


@given(
    latest=st.integers(1, 100),
    retention=st.integers(1, 20),
    in_force=st.integers(0, 100) | st.none(),
)
def test_retention_keeps_the_newest_and_the_model_in_force(
    latest: int, retention: int, in_force: int | None
) -> None:
    if in_force is not None and in_force > latest:
        in_force = latest
    floor = retention_floor(latest, retention, in_force)
    assert floor <= latest - retention + 1  # the newest `retention` versions stay
    if in_force is not None:
        assert floor <= in_force  # and the model in force
    assert floor in (latest - retention + 1, in_force)  # nothing more than that stays
