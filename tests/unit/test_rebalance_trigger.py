"""Why the leader rebalances (coordinator.protocol.leader_trigger): each trigger of the table on
its own, the phase times the machine measures, and the stateful test extended to check the trigger
of every published model against what changed."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from test_leader_machine import TASKS, CoordinatorMachine, Leader, leader, run_to_publish

from coordinator.protocol.leader import LeaderMachine
from coordinator.protocol.leader_events import (
    BarrierUpdated,
    CoordinatorSettings,
    GrouperFinished,
    LeadershipGained,
    MembershipChanged,
    PublishJobModel,
    RunGrouper,
    TimePassed,
)
from coordinator.protocol.leader_trigger import Trigger, rebalance_cause
from groupers import HostAffinityGrouper
from metadata.model import ContainerModel, FrozenMap, JobModel


def settled(processors: dict[str, str], **kw: float) -> Leader:
    """A leader whose first model is in force."""
    core = leader(processors, **kw)
    published = run_to_publish(core, 5.0)
    core.handle(BarrierUpdated(5.5, published.model.version, frozenset(processors)))
    assert core.in_force == published.model
    return core


def test_the_first_model_names_its_trigger_and_phases() -> None:
    core = leader({"p-0": "a"}, debounce_s=2.0)
    core.handle(TimePassed(2.0))
    request = core.last_request
    assert request is not None and request.trigger == Trigger.FIRST_MODEL
    answer = HostAffinityGrouper().group(request.tasks, request.metadata)
    actions = core.handle(GrouperFinished(2.75, request.request, answer))
    published = next(a for a in actions if isinstance(a, PublishJobModel))
    assert published.cause is not None and published.cause.trigger == Trigger.FIRST_MODEL
    assert published.cause.debounce_s == 2.0  # from gaining leadership (the first change) to t=2
    assert published.cause.grouper_s == 0.75


def test_processors_gone_new_and_changed() -> None:
    core = settled({"p-0": "a", "p-1": "b"}, debounce_s=1.0)
    core.handle(MembershipChanged(10.0, {"p-0": "a"}))
    gone = run_to_publish(core, 11.5)
    assert (trigger(gone), gone.cause and gone.cause.debounce_s) == (Trigger.PROCESSORS_GONE, 1.5)
    core.handle(BarrierUpdated(12.0, gone.model.version, frozenset({"p-0"})))

    core.handle(MembershipChanged(20.0, {"p-0": "a", "p-2": "c"}))
    assert trigger(run_to_publish(core, 21.0)) == Trigger.PROCESSORS_NEW
    core.handle(BarrierUpdated(22.0, gone.model.version + 1, frozenset({"p-0", "p-2"})))

    core.handle(MembershipChanged(30.0, {"p-0": "a", "p-3": "c"}))
    assert trigger(run_to_publish(core, 31.0)) == Trigger.PROCESSORS_CHANGED


def test_grace_ended() -> None:
    core = settled({"p-0": "a", "p-1": "b"}, debounce_s=0.0, processor_grace_s=5.0)
    core.handle(MembershipChanged(11.0, {"p-0": "a"}))
    assert not any(isinstance(a, RunGrouper) for a in core.handle(TimePassed(13.0)))
    published = run_to_publish(core, 16.0)
    assert published.cause is not None
    assert (published.cause.trigger, published.cause.debounce_s) == (Trigger.GRACE_ENDED, 5.0)


def test_a_replacement_at_the_same_location_is_not_grace_ended() -> None:
    core = settled({"p-0": "a", "p-1": "b"}, debounce_s=0.0, processor_grace_s=20.0)
    core.handle(MembershipChanged(11.0, {"p-0": "a"}))
    core.handle(MembershipChanged(12.0, {"p-0": "a", "p-9": "b"}))
    assert core.last_request is not None
    assert core.last_request.trigger == Trigger.PROCESSORS_CHANGED


def test_the_rerun_after_a_timed_out_barrier() -> None:
    core = settled({"p-0": "a", "p-1": "b"}, debounce_s=1.0, barrier_timeout_s=10.0)
    core.handle(MembershipChanged(11.0, {"p-0": "a", "p-1": "b", "p-2": "c"}))
    published = run_to_publish(core, 12.0)
    core.handle(BarrierUpdated(13.0, published.model.version, frozenset({"p-0", "p-1"})))
    actions = core.handle(TimePassed(22.0))  # p-2 never joins
    rerun = next(a for a in actions if isinstance(a, RunGrouper))
    assert rerun.trigger == Trigger.BARRIER_TIMED_OUT
    assert core.running_cause is not None and core.running_cause.debounce_s == 0.0


def test_a_change_without_membership_change_is_assignment_changed() -> None:
    one = {"p-0": "a"}
    model = JobModel(3, FrozenMap({"p-0": ContainerModel("p-0", "a", FrozenMap())}))
    core = LeaderMachine(TASKS, CoordinatorSettings(debounce_s=0.0))
    core.handle(LeadershipGained(0.0, one, {}, latest=model, in_force=model))
    core.dirty_since = core.last_change = 0.0  # e.g. the task set changed under it
    cause = rebalance_cause(1.0, core, [])
    assert cause.trigger == Trigger.ASSIGNMENT_CHANGED


class TriggerCheckingMachine(CoordinatorMachine):
    """The leader's stateful test, also checking every published model's trigger and phases."""

    def feed(self, event: object) -> None:
        before = self.core.in_force
        super().feed(event)
        for action in self.published_this_step:
            check_trigger(action, before)


def trigger(action: PublishJobModel) -> Trigger | None:
    return action.cause.trigger if action.cause else None


def check_trigger(action: PublishJobModel, before: JobModel | None) -> None:
    cause = action.cause
    assert cause is not None and cause.grouper_s is not None
    assert cause.debounce_s >= 0 and cause.grouper_s >= 0
    now = set(action.model.containers)
    was = set(before.containers) if before else set()
    if cause.trigger == Trigger.FIRST_MODEL:
        assert before is None
    elif cause.trigger == Trigger.PROCESSORS_GONE:
        assert was - now and not now - was
    elif cause.trigger == Trigger.PROCESSORS_NEW:
        assert now - was and not was - now
    elif cause.trigger == Trigger.PROCESSORS_CHANGED:
        assert now - was and was - now
    elif cause.trigger == Trigger.BARRIER_TIMED_OUT:
        assert cause.debounce_s == 0.0
    elif cause.trigger == Trigger.UNREADABLE:
        assert action.repair and "unreadable (" in cause.note  # says what could not be read
    else:
        assert cause.trigger in (Trigger.GRACE_ENDED, Trigger.ASSIGNMENT_CHANGED)
    if cause.trigger != Trigger.UNREADABLE:
        assert not action.repair and not cause.note


TriggerCheckingMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestTriggerStateMachine = TriggerCheckingMachine.TestCase
