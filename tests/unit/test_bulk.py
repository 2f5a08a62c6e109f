"""metadata.bulk: the garbage collector paused while many objects are built, and as it was
after, whatever happens inside."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from metadata.bulk import collector_paused
from metadata.columns import task_columns, tasks_from_columns
from metadata.model import SystemStreamPartition, TaskModel


@pytest.fixture
def collector() -> Iterator[None]:
    was = gc.isenabled()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


@pytest.mark.usefixtures("collector")
@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_off_inside_and_as_it_was_after(enabled: bool) -> None:
    if enabled:
        gc.enable()
    else:
        gc.disable()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():  # nested: the inner one leaves it off
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled() is enabled
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("a failed build")
    assert gc.isenabled() is enabled


@pytest.mark.usefixtures("collector")
def test_building_tasks_back_pauses_the_collector_and_turns_it_on_again() -> None:
    seen: list[bool] = []
    tasks = [
        TaskModel(f"Partition {n}", frozenset({SystemStreamPartition("kafka", "e", n)}), n)
        for n in range(3)
    ]
    columns = task_columns(tasks)
    gc.enable()
    original = TaskModel.__post_init__

    def spy(self: TaskModel) -> None:
        seen.append(gc.isenabled())
        original(self)

    TaskModel.__post_init__ = spy  # type: ignore[method-assign]
    try:
        assert tasks_from_columns(columns) == tasks
    finally:
        TaskModel.__post_init__ = original  # type: ignore[method-assign]
    assert seen == [False, False, False]
    assert gc.isenabled()
