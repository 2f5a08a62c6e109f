"""run_pinned on a real multi-executor cluster: tasks run on the executor the placement names."""

from __future__ import annotations

import sys
import time

import pytest
from pyspark import cloudpickle
from spark_app import SparkApp

from locality.spark import (
    LOCALITY_WAIT_KEYS,
    SparkExecutorLocationIdProvider,
    current_executor_host,
    current_executor_id,
    run_pinned,
)

pytestmark = pytest.mark.spark
# The executors cannot import this test module: ship its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _where(task: str, delay: float) -> tuple[str | None, str | None, str]:
    time.sleep(delay)
    return (
        current_executor_id(),
        current_executor_host(),
        SparkExecutorLocationIdProvider().location_id(),
    )


def test_executors_are_listed_without_the_driver_one_per_worker_host(app: SparkApp) -> None:
    executors = app.executors()
    assert len(executors) == len(app.hosts)
    assert {e.host for e in executors} == set(app.hosts)
    assert all(e.executor_id != "driver" for e in executors)
    assert executors[0].task_location == f"executor_{executors[0].host}_{executors[0].executor_id}"


def test_a_task_knows_its_executor_id_host_and_location(app: SparkApp) -> None:
    executors = app.executors()
    items = {f"t{i}": 0.0 for i in range(len(executors))}
    placement = {f"t{i}": e.executor_id for i, e in enumerate(executors)}
    run = run_pinned(app.sc, items, placement, _where)
    assert run.pinned_ok == run.total == len(executors)
    for i, executor in enumerate(executors):
        task = run.tasks[f"t{i}"]
        assert task.result == (executor.executor_id, executor.host, executor.host)
        assert task.executor_id == executor.executor_id and task.host == executor.host
        assert task.pinned is True and task.wanted == executor.executor_id


def test_at_least_99_percent_of_tasks_run_on_the_named_executor(app: SparkApp) -> None:
    """A skewed placement (half the tasks on one executor): the 30 s wait outlasts the backlog."""
    executors = app.executors()
    n = 90
    placement = {}
    for i in range(n):
        # 1/2 on the first executor, the rest spread over the others
        target = executors[0] if i % 2 == 0 else executors[1 + (i // 2) % (len(executors) - 1)]
        placement[f"task-{i:03d}"] = target.executor_id
    run = run_pinned(app.sc, dict.fromkeys(placement, 0.02), placement, _where, locality_wait="30s")
    assert run.total == n
    assert run.ratio >= 0.99, run.report()
    assert {t: r.executor_id for t, r in run.tasks.items()} == placement  # in fact: all of them
    assert run.report() == f"{n}/{n} tasks ran where placed"


def test_a_host_placement_keeps_tasks_on_that_host(app: SparkApp) -> None:
    executors = app.executors()
    placement = {f"h{i}": executors[i % len(executors)].host for i in range(12)}
    run = run_pinned(app.sc, dict.fromkeys(placement, 0.0), placement, _where)
    assert run.pinned_ok == run.total == 12
    assert all(task.host == task.wanted for task in run.tasks.values())


def test_the_locality_wait_argument_is_applied_per_stage_and_restored(app: SparkApp) -> None:
    """Every task on one executor, each longer than the wait: with no wait the tasks spill to the
    idle executors; with a long wait they all queue on the named one."""
    target = app.executors()[0].executor_id
    placement = {f"s{i}": target for i in range(6)}
    conf = app.sc._jsc.sc().conf()
    before = {key: conf.contains(key) for key in LOCALITY_WAIT_KEYS}

    spilled = run_pinned(
        app.sc, dict.fromkeys(placement, 0.4), placement, _where, locality_wait="0s"
    )
    kept = run_pinned(app.sc, dict.fromkeys(placement, 0.4), placement, _where, locality_wait="60s")

    assert spilled.pinned_ok < spilled.total, spilled.report()
    assert kept.pinned_ok == kept.total, kept.report()
    assert {key: conf.contains(key) for key in LOCALITY_WAIT_KEYS} == before


def test_no_placement_is_sparks_default_and_unknown_executors_are_reported(app: SparkApp) -> None:
    default = run_pinned(app.sc, {f"d{i}": 0.0 for i in range(6)}, {}, _where)
    assert default.total == 0 and default.ratio == 1.0 and len(default.tasks) == 6
    assert all(task.pinned is None and task.executor_id for task in default.tasks.values())

    unknown = run_pinned(app.sc, {"x": 0.0, "y": 0.0}, {"x": "no-such-executor"}, _where)
    assert unknown.unplaceable == ("x",)
    assert unknown.total == 1 and unknown.pinned_ok == 0
    assert unknown.tasks["x"].pinned is False and unknown.tasks["y"].pinned is None
    assert "placed on no live executor" in unknown.report()
