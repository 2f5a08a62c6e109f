"""What a new leader does about job-model data it cannot read (issue 28 item 3): the rules of
:mod:`coordinator.protocol.leader_recovery` and the leader machine following them, as scenarios
(the stateful test in ``test_leader_machine.py`` drives them with random sequences)."""

from __future__ import annotations

import pytest

from coordinator.protocol.leader import LeaderMachine
from coordinator.protocol.leader_events import (
    Action,
    BarrierUpdated,
    CoordinatorSettings,
    GrouperFailed,
    GrouperFinished,
    InForceUnreadable,
    LeadershipGained,
    MarkBarrier,
    MembershipChanged,
    PublishJobModel,
    RebalanceSkipped,
    RunGrouper,
    TimePassed,
)
from coordinator.protocol.leader_recovery import (
    Recovery,
    Unreadable,
    next_to_read,
    recovery,
)
from coordinator.protocol.leader_trigger import Trigger
from groupers import GrouperMetadata, HostAffinityGrouper
from metadata.model import (
    BarrierState,
    ContainerModel,
    FrozenMap,
    JobModel,
    SystemStreamPartition,
    TaskModel,
)

TASKS = tuple(
    TaskModel(f"Partition {n}", frozenset({SystemStreamPartition("kafka", "events", n)}), n)
    for n in range(6)
)
LIVE = {"p-0": "host-a", "p-1": "host-b"}
BAD_POINTER = Unreadable(None, "/affinity/clicks-1/jobModelVersion", "not a job-model version")


def model(version: int) -> JobModel:
    """Version ``version``: the tasks as host-affinity spreads them over p-0 and p-1."""
    containers = HostAffinityGrouper().group(TASKS, GrouperMetadata(LIVE, {}, {}))
    return JobModel(version, FrozenMap({c.processor_id: c for c in containers}), FrozenMap())


def bad(version: int) -> Unreadable:
    return Unreadable(version, f"/affinity/clicks-1/jobModels/{version}", "checksum mismatch")


def test_the_recovery_table() -> None:
    assert recovery([], model(3)) is Recovery.NONE
    assert recovery([], None) is Recovery.NONE
    assert recovery([bad(4)], model(3)) is Recovery.OLDER
    assert recovery([BAD_POINTER], model(4)) is Recovery.OLDER
    assert recovery([bad(4), bad(3)], None) is Recovery.FRESH


def test_next_to_read_is_the_newest_done_not_known_unreadable() -> None:
    done, timed_out = BarrierState.DONE, BarrierState.TIMED_OUT
    states = {5: timed_out, 4: done, 3: None, 2: done, 1: done}
    assert next_to_read(states, set()) == 4
    assert next_to_read(states, {4}) == 2
    assert next_to_read(states, {4, 2, 1}) is None


class Leader:
    """A leader machine and what it asked for."""

    def __init__(self, **kw: float) -> None:
        self.core = LeaderMachine(TASKS, CoordinatorSettings(debounce_s=1.0, **kw))
        self.actions: list[Action] = []

    def feed(self, event: object) -> list[Action]:
        actions = self.core.handle(event)  # type: ignore[arg-type]
        self.actions += actions
        return actions

    def last_run(self) -> RunGrouper:
        return [a for a in self.actions if isinstance(a, RunGrouper)][-1]

    def answer(self, now: float) -> list[Action]:
        run = self.last_run()
        containers = HostAffinityGrouper().group(run.tasks, run.metadata)
        return self.feed(GrouperFinished(now, run.request, containers))


def test_a_bad_pointer_republishes_even_an_unchanged_model() -> None:
    """Only the pointer is bad: version 4 reads clean and is the grouper's answer again. It is
    published anyway (as version 5), planned against nothing, with the trigger and note."""
    leader = Leader()
    in_force = model(4)
    told = leader.feed(
        LeadershipGained(
            0.0, LIVE, {}, in_force=in_force, unreadable=(BAD_POINTER,), version_floor=4
        )
    )
    (unreadable,) = [a for a in told if isinstance(a, InForceUnreadable)]
    assert unreadable.recovery is Recovery.OLDER and unreadable.fallback == 4
    assert "the version pointer unreadable" in unreadable.note
    assert "fell back to version 4" in unreadable.note
    leader.feed(TimePassed(1.0))  # the debounce
    assert leader.last_run().trigger is Trigger.UNREADABLE
    (published,) = [a for a in leader.answer(1.0) if isinstance(a, PublishJobModel)]
    assert published.model.same_assignment(in_force)
    assert published.model.version == 5 and published.repair
    assert published.base is None and published.gaining is None and not published.losing
    assert published.cause is not None and published.cause.note == unreadable.note
    # Owed once: the next rebalance of an unchanged model is skipped as usual.
    leader.feed(BarrierUpdated(2.0, 5, frozenset(LIVE)))
    assert leader.core.repair is None
    assert_an_unchanged_answer_is_skipped(leader, 3.0)


def assert_an_unchanged_answer_is_skipped(leader: Leader, now: float) -> None:
    """A processor flaps away and back: the rebalance that follows is an ordinary one."""
    leader.feed(MembershipChanged(now, {"p-0": "host-a"}))
    leader.feed(MembershipChanged(now + 0.1, LIVE))
    leader.feed(TimePassed(now + 2.0))
    run = leader.last_run()
    assert run.trigger is not Trigger.UNREADABLE
    assert any(isinstance(a, RebalanceSkipped) for a in leader.answer(now + 2.0))


def test_nothing_reads_clean_a_fresh_model_above_every_stored_version() -> None:
    leader = Leader()
    told = leader.feed(
        LeadershipGained(
            0.0, LIVE, {"Partition 0": "host-b"}, unreadable=(bad(7), bad(6)), version_floor=7
        )
    )
    (unreadable,) = [a for a in told if isinstance(a, InForceUnreadable)]
    assert unreadable.recovery is Recovery.FRESH and unreadable.fallback is None
    assert "a fresh model from the live processors and task locality" in unreadable.note
    leader.feed(TimePassed(1.0))
    (published,) = [a for a in leader.answer(1.0) if isinstance(a, PublishJobModel)]
    assert published.model.version == 8 and published.repair
    assert "Partition 0" in published.model.containers["p-1"].tasks  # its recorded location


def test_a_failed_grouper_run_is_tried_again_while_the_repair_is_owed() -> None:
    leader = Leader()
    leader.feed(
        LeadershipGained(0.0, LIVE, {}, in_force=model(4), unreadable=(bad(5),), version_floor=5)
    )
    leader.feed(TimePassed(1.0))
    first = leader.last_run()
    failed = leader.feed(GrouperFinished(1.5, first.request, None, "timed out after 1 s"))
    assert any(isinstance(a, GrouperFailed) for a in failed)
    leader.feed(TimePassed(2.6))  # a debounce later
    again = leader.last_run()
    assert again.request != first.request and again.trigger is Trigger.UNREADABLE
    (published,) = [a for a in leader.answer(2.6) if isinstance(a, PublishJobModel)]
    assert published.model.version == 6 and published.repair


def test_an_inherited_rebalance_above_the_unreadable_model_ends_the_repair() -> None:
    """Version 5 (DONE) cannot be read; version 6 (NEW) can: the new leader sees 6 through, and
    once it is DONE nothing more is owed (an unchanged answer is skipped)."""
    leader = Leader()
    latest = model(6)
    leader.feed(
        LeadershipGained(
            0.0,
            LIVE,
            {},
            latest=latest,
            latest_barrier=BarrierState.NEW,
            in_force=model(4),
            unreadable=(bad(5),),
            version_floor=6,
        )
    )
    assert leader.core.repair is not None
    done = leader.feed(BarrierUpdated(0.5, 6, frozenset(LIVE)))
    assert MarkBarrier(6, BarrierState.DONE, 0.5) in done
    assert leader.core.repair is None
    assert not any(isinstance(a, RunGrouper) for a in leader.actions)
    assert_an_unchanged_answer_is_skipped(leader, 5.0)


@pytest.mark.parametrize("pointer_bad", [False, True])
def test_a_barrier_left_new_by_an_unreadable_model_is_timed_out(pointer_bad: bool) -> None:
    """Version 6 was being rolled out (barrier NEW) when its data (or the pointer) went bad:
    nobody can see it through, so the new leader times it out at once and republishes."""
    leader = Leader()
    unreadable = (BAD_POINTER,) if pointer_bad else (bad(6),)
    told = leader.feed(
        LeadershipGained(
            0.0,
            LIVE,
            {},
            in_force=model(5),
            unreadable=unreadable,
            version_floor=6,
            abandoned=(6,),
        )
    )
    assert MarkBarrier(6, BarrierState.TIMED_OUT, 0.0) in told
    leader.feed(TimePassed(1.0))
    (published,) = [a for a in leader.answer(1.0) if isinstance(a, PublishJobModel)]
    assert published.model.version == 7 and published.repair


def test_containers_of_the_fallback_are_only_the_grouper_previous_assignment() -> None:
    """The fallback model is what the grouper is given as the previous assignment (stickiness):
    a processor of it that is gone is not named (I1)."""
    leader = Leader()
    old = model(3)
    gone = ContainerModel("p-9", "host-z", FrozenMap({}))
    with_gone = JobModel(3, FrozenMap({**old.containers, "p-9": gone}), FrozenMap())
    leader.feed(
        LeadershipGained(0.0, LIVE, {}, in_force=with_gone, unreadable=(bad(4),), version_floor=4)
    )
    leader.feed(TimePassed(1.0))
    run = leader.last_run()
    assert dict(run.metadata.previous_task_to_processor) == old.task_to_processor()
    (published,) = [a for a in leader.answer(1.0) if isinstance(a, PublishJobModel)]
    assert set(published.model.containers) == set(LIVE)
