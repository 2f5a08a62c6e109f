"""Probing rebalances and the standby rules of the leader (coordinator.protocol.leader_probing),
with the real host-affinity grouper where its answer matters."""

from __future__ import annotations

import pytest
import structlog

from coordinator.leader.grouper_worker import GrouperOutcome
from coordinator.leader.grouping import run_recheck
from coordinator.observability import CoordinatorMetrics
from coordinator.protocol import leader_probing, leader_timers
from coordinator.protocol.leader import LeaderMachine
from coordinator.protocol.leader_events import (
    BarrierUpdated,
    CoordinatorSettings,
    GrouperFinished,
    LeadershipGained,
    Published,
    PublishJobModel,
    RebalanceSkipped,
    RecheckFinished,
    RunGrouper,
    RunRecheck,
    ScheduleWakeup,
    TimePassed,
)
from coordinator.protocol.leader_policy import check_answer
from coordinator.protocol.leader_probing import recheck_metadata, settled, task_state
from coordinator.protocol.leader_trigger import Trigger
from groupers import GrouperMetadata, get_grouper
from metadata.model import ContainerModel, FrozenMap, JobModel, SystemStreamPartition, TaskModel

TASKS = tuple(
    TaskModel(f"Partition {n}", frozenset({SystemStreamPartition("kafka", "events", n)}), n)
    for n in range(6)
)
THREE = {"a": "h1", "b": "h2", "c": "h3"}


def test_task_state_counts_the_active_as_caught_up_and_only_live_processors() -> None:
    lags = {"b": {"t1": 40, "t2": 0}, "gone": {"t1": 0}, "a": {"t1": 9}}
    state = task_state(lags, {"t1": "a", "t3": "gone"}, ["a", "b"])
    assert state == {"t1": {"a": 0, "b": 40}, "t2": {"b": 0}}


def _scale_out(**options: object) -> tuple[GrouperMetadata, dict[str, ContainerModel], object]:
    """Two processors run six tasks; a third comes: the answer, and the grouper's recheck."""
    grouper = get_grouper("host-affinity", **options)
    first = GrouperMetadata({"a": "h1", "b": "h2"}, {}, {})
    before = {n: c.processor_id for c in grouper.group(TASKS, first) for n in c.tasks}
    metadata = GrouperMetadata(THREE, {}, before, task_state=task_state({}, before, THREE))
    containers = check_answer(TASKS, metadata, grouper.group(TASKS, metadata))
    question = recheck_metadata(metadata, list(containers.values()))
    assert question is not None
    return metadata, containers, grouper.group(TASKS, question)


def test_a_warm_up_answer_is_not_settled_until_its_copy_is_caught_up() -> None:
    metadata, containers, recheck = _scale_out(max_warmup_replicas=2)
    assert not containers["c"].tasks and len(containers["c"].standby_tasks) == 2  # warm-ups
    assert not settled(TASKS, metadata, containers, recheck)
    # With the warm-up copies caught up the grouper moves them: that answer is final.
    moved = check_answer(TASKS, recheck_metadata(metadata, list(containers.values())), recheck)
    question = recheck_metadata(metadata, list(moved.values()))
    assert question is not None
    again = get_grouper("host-affinity", max_warmup_replicas=2).group(TASKS, question)
    assert len(moved["c"].tasks) == 2
    assert settled(TASKS, metadata, moved, again)


def test_moves_held_back_by_the_movement_limit_are_not_settled() -> None:
    metadata, containers, recheck = _scale_out(max_moves_per_rebalance=1)
    assert len(containers["c"].tasks) == 1
    assert not settled(TASKS, metadata, containers, recheck)


def test_without_warm_ups_or_limits_a_scale_out_is_settled_at_once() -> None:
    metadata, containers, recheck = _scale_out()
    assert len(containers["c"].tasks) == 2
    assert settled(TASKS, metadata, containers, recheck)
    assert settled(TASKS, metadata, containers, None)  # no recheck: nothing to probe for
    assert settled(TASKS, metadata, containers, "nonsense")  # an invalid one neither


def _answer(core: LeaderMachine, now: float, answer: object, recheck: object) -> list[object]:
    request = core.running
    assert request is not None
    actions: list[object] = list(core.handle(GrouperFinished(now, request, answer, None)))
    for action in actions:
        if isinstance(action, PublishJobModel):
            actions += core.handle(Published(now, action.model.version))
            everyone = frozenset(action.model.containers)
            actions += core.handle(BarrierUpdated(now, action.model.version, everyone))
        elif isinstance(action, RunRecheck):
            # Asked of the model in force only: after its barrier is DONE, never before.
            assert core.in_force is not None and action.version == core.in_force.version
            assert core.pending is None
            actions += core.handle(RecheckFinished(now, action.version, recheck))
    return actions


def _containers(owner: dict[str, str]) -> set[ContainerModel]:
    tasks = {t.name: t for t in TASKS}
    return {
        ContainerModel(
            pid, loc, FrozenMap({n: tasks[n] for n, p in sorted(owner.items()) if p == pid})
        )
        for pid, loc in THREE.items()
    }


def test_the_leader_probes_every_interval_until_the_answer_is_final() -> None:
    core = LeaderMachine(TASKS, CoordinatorSettings(debounce_s=0.0, probing_interval_s=5.0))
    gained = core.handle(LeadershipGained(0.0, THREE, {}))
    request = next(a for a in gained if isinstance(a, RunGrouper))
    assert request.trigger == Trigger.FIRST_MODEL
    names = [t.name for t in TASKS]
    step = _containers({n: ("a" if i < 3 else "b") for i, n in enumerate(names)})  # c waits
    final = _containers({n: "abc"[i // 2] for i, n in enumerate(names)})
    actions = _answer(core, 1.0, step, final)  # published, DONE, rechecked: not final
    kinds = [type(a).__name__ for a in actions]
    assert kinds.index("MarkBarrier") < kinds.index("RunRecheck")  # the recheck waits for DONE
    assert core.in_force is not None and core.in_force.version == 1 and core.probing
    assert ScheduleWakeup(6.0) in actions
    assert not any(isinstance(a, RunGrouper) for a in core.handle(TimePassed(5.9)))
    probe = next(a for a in core.handle(TimePassed(6.0)) if isinstance(a, RunGrouper))
    assert probe.trigger == Trigger.PROBING
    # The copies have not caught up: the grouper says the same. No new version; probe again.
    actions = _answer(core, 6.5, step, final)
    assert any(isinstance(a, RebalanceSkipped) for a in actions)
    assert core.latest_version == 1 and core.probing
    assert ScheduleWakeup(11.5) in core.handle(TimePassed(7.0))
    probe = next(a for a in core.handle(TimePassed(11.5)) if isinstance(a, RunGrouper))
    assert probe.trigger == Trigger.PROBING
    # Caught up: the next answer moves the tasks; it is final, so probing stops.
    actions = _answer(core, 12.0, final, final)
    published = next(a for a in actions if isinstance(a, PublishJobModel))
    assert published.cause is not None and published.cause.trigger == Trigger.PROBING
    assert core.in_force is not None and core.in_force.version == 2 and not core.probing
    assert core.handle(TimePassed(100.0)) == []


def test_probing_is_off_without_an_interval() -> None:
    core = LeaderMachine(TASKS, CoordinatorSettings(debounce_s=0.0))
    core.handle(LeadershipGained(0.0, THREE, {}))
    names = [t.name for t in TASKS]
    actions = _answer(core, 1.0, _containers({n: "abc"[i // 2] for i, n in enumerate(names)}), None)
    assert not any(isinstance(a, RunRecheck) for a in actions)  # no second grouper run
    assert core.handle(TimePassed(1000.0)) == []


def test_the_step_that_decides_done_leaves_the_recheck_question_to_the_adapter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At 1,000,000 tasks working the question out takes seconds: worked out by the machine, in
    the step that decided DONE, it held the barrier's decision back that long."""

    def worked_out_here(*_: object) -> None:
        raise AssertionError("the recheck question was worked out by the machine")

    monkeypatch.setattr(leader_probing, "recheck_metadata", worked_out_here)
    monkeypatch.setattr(leader_timers, "recheck_metadata", worked_out_here, raising=False)
    core = LeaderMachine(TASKS, CoordinatorSettings(debounce_s=0.0, probing_interval_s=5.0))
    request = next(
        a for a in core.handle(LeadershipGained(0.0, THREE, {})) if isinstance(a, RunGrouper)
    )
    answer = _containers({t.name: "abc"[i // 2] for i, t in enumerate(TASKS)})
    (publish,) = [
        a
        for a in core.handle(GrouperFinished(1.0, request.request, answer, None))
        if isinstance(a, PublishJobModel)
    ]
    core.handle(Published(1.0, 1))
    actions = core.handle(BarrierUpdated(1.5, 1, frozenset(THREE)))
    kinds = [type(a).__name__ for a in actions]
    assert kinds.index("MarkBarrier") < kinds.index("RunRecheck")
    (recheck,) = [a for a in actions if isinstance(a, RunRecheck)]
    assert recheck.model == publish.model and recheck.version == 1
    assert recheck.metadata == request.metadata


def test_the_adapter_asks_the_grouper_the_recheck_question() -> None:
    metadata = GrouperMetadata(THREE, {}, {})
    containers = _containers({t.name: "abc"[i // 2] for i, t in enumerate(TASKS)})
    model = JobModel(1, FrozenMap({c.processor_id: c for c in containers}))
    asked: list[GrouperMetadata] = []

    class Worker:
        def run(self, tasks: object, question: GrouperMetadata, timeout_s: float) -> object:
            asked.append(question)
            return GrouperOutcome(containers, None, 0.01)

    finished = run_recheck(
        Worker(),  # type: ignore[arg-type]
        RunRecheck(TASKS, model, metadata),
        timeout_s=5.0,
        metrics=CoordinatorMetrics(),
        log=structlog.get_logger("test"),
        clock=lambda: 7.0,
    )
    question = recheck_metadata(metadata, list(model.containers.values()))
    assert asked == [question]
    assert finished == RecheckFinished(7.0, 1, containers, question)


@pytest.mark.parametrize("same", [True, False])
def test_the_machine_judges_the_recheck_on_the_question_the_adapter_asked(
    monkeypatch: pytest.MonkeyPatch, same: bool
) -> None:
    """The adapter hands the question back with the answer: the machine does not work it out
    a second time (seconds at 1,000,000 tasks, while events wait)."""
    core = LeaderMachine(TASKS, CoordinatorSettings(debounce_s=0.0, probing_interval_s=5.0))
    request = next(
        a for a in core.handle(LeadershipGained(0.0, THREE, {})) if isinstance(a, RunGrouper)
    )
    names = [t.name for t in TASKS]
    step = _containers({n: ("a" if i < 3 else "b") for i, n in enumerate(names)})
    final = _containers({n: "abc"[i // 2] for i, n in enumerate(names)})
    core.handle(GrouperFinished(1.0, request.request, step, None))
    core.handle(Published(1.0, 1))
    actions = core.handle(BarrierUpdated(1.5, 1, frozenset(THREE)))
    (recheck,) = [a for a in actions if isinstance(a, RunRecheck)]
    question = recheck_metadata(recheck.metadata, list(recheck.model.containers.values()))

    def worked_out_again(*_: object) -> None:
        raise AssertionError("the machine worked the recheck question out again")

    monkeypatch.setattr(leader_probing, "recheck_metadata", worked_out_again)
    core.handle(RecheckFinished(2.0, 1, step if same else final, question))
    assert core.probing is (not same)  # the same answer: final; another: probe again
