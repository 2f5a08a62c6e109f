"""host-affinity with replicas and capacity (issue 13): property tests for each rule.

- defaults: the new options at their defaults, empty capacity and state, and standbys (which
  never move an active) give the answers of the plain grouper;
- capacity: processor p gets floor or ceil of T * cap(p) / sum(cap);
- standbys: valid, the right number per task, spread to another location first, balanced, and
  sticky (fed back as task_state, the same standbys come out);
- failover: a lost task goes to a live processor with a caught-up copy, within balance.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupers import GrouperMetadata, InvalidAssignment, get_grouper, validate
from groupers.locations import common_depth, location_path
from groupers.measures import owners, tasks_moved
from groupers.testing import GrouperInput, check_grouper, check_replica_options, grouper_inputs
from metadata.model import ContainerModel, SystemStreamPartition, TaskModel

PLAIN = get_grouper("host-affinity")


def actives(containers: set[ContainerModel]) -> dict[str, list[str]]:
    return {c.processor_id: sorted(c.tasks) for c in containers}


def standbys_of(containers: set[ContainerModel]) -> dict[str, list[str]]:
    return {c.processor_id: sorted(c.standby_tasks) for c in containers}


@st.composite
def capacities(draw: st.DrawFn, data: GrouperInput) -> dict[str, int]:
    return {pid: draw(st.integers(1, 4)) for pid in sorted(data.metadata.processor_locality)}


# ------------------------------------------------------------------------ defaults


@settings(max_examples=150, deadline=None)
@given(grouper_inputs(), st.integers(1, 3), st.data())
def test_defaults_and_standbys_leave_actives_as_before(
    data: GrouperInput, replicas: int, draw: st.DataObject
) -> None:
    before = PLAIN.group(data.tasks, data.metadata)
    explicit = get_grouper(
        "host-affinity",
        standby_replicas=0,
        max_warmup_replicas=0,
        acceptable_recovery_lag=0,
        max_moves_per_rebalance=None,
    )
    assert explicit.group(data.tasks, data.metadata) == before
    ones = replace(
        data.metadata, processor_capacity=dict.fromkeys(data.metadata.processor_locality, 1)
    )
    assert PLAIN.group(data.tasks, ones) == before
    with_standbys = get_grouper("host-affinity", standby_replicas=replicas)
    assert actives(with_standbys.group(data.tasks, data.metadata)) == actives(before)
    # Copies that are not caught up change nothing.
    names = sorted(t.name for t in data.tasks)
    live = sorted(data.metadata.processor_locality)
    lagging = {n: {draw.draw(st.sampled_from(live)): draw.draw(st.integers(1, 9))} for n in names}
    stale = replace(data.metadata, task_state=lagging)
    assert PLAIN.group(data.tasks, stale) == before


# ------------------------------------------------------------------------ capacity


@settings(max_examples=150, deadline=None)
@given(grouper_inputs(max_tasks=60), st.data())
def test_capacity_balance_bounds(data: GrouperInput, draw: st.DataObject) -> None:
    caps = draw.draw(capacities(data))
    metadata = replace(data.metadata, processor_capacity=caps)
    answer = PLAIN.group(data.tasks, metadata)
    validate(data.tasks, metadata, answer)
    total, whole = len(data.tasks), sum(caps.values())
    for container in answer:
        share = total * caps[container.processor_id]
        assert share // whole <= len(container.tasks) <= -(-share // whole), container.processor_id


def test_capacity_twice_the_tasks_on_twice_the_capacity() -> None:
    tasks = [task(n) for n in range(12)]
    metadata = GrouperMetadata({"big": "h1", "small": "h2"}, {}, {}, processor_capacity={"big": 2})
    answer = actives(PLAIN.group(tasks, metadata))
    assert (len(answer["big"]), len(answer["small"])) == (8, 4)


# ------------------------------------------------------------------------ standbys


def task(n: int) -> TaskModel:
    return TaskModel(f"Partition {n}", frozenset({SystemStreamPartition("kafka", "events", n)}), n)


def _copies(answer: set[ContainerModel]) -> dict[str, list[str]]:
    held: dict[str, list[str]] = {}
    for container in answer:
        for name in container.standby_tasks:
            held.setdefault(name, []).append(container.processor_id)
    return held


@settings(max_examples=150, deadline=None)
@given(grouper_inputs(max_tasks=60, max_processors=10), st.integers(1, 3))
def test_standbys_valid_counted_and_balanced(data: GrouperInput, replicas: int) -> None:
    grouper = get_grouper("host-affinity", standby_replicas=replicas)
    answer = grouper.group(data.tasks, data.metadata)
    validate(data.tasks, data.metadata, answer)
    live = len(data.metadata.processor_locality)
    per_task = min(replicas, live - 1)
    copies = _copies(answer)
    assert all(len(copies.get(t.name, [])) == per_task for t in data.tasks)
    total = per_task * len(data.tasks)
    loads = [len(c.standby_tasks) for c in answer]
    assert max(loads) <= -(-total // live)


@settings(max_examples=150, deadline=None)
@given(grouper_inputs(max_tasks=60, max_processors=10, schemes=("hierarchical", "mixed")))
def test_one_standby_goes_to_the_most_distant_place_with_room(data: GrouperInput) -> None:
    """A standby shares as little of its location with the active as any processor under its
    cap: every processor more distant from the active is full (at its cap)."""
    answer = get_grouper("host-affinity", standby_replicas=1).group(data.tasks, data.metadata)
    where = {pid: location_path(loc) for pid, loc in data.metadata.processor_locality.items()}
    live = len(where)
    cap = -(-len(data.tasks) // live) if live > 1 else 0
    load = {c.processor_id: len(c.standby_tasks) for c in answer}
    active = owners(answer)
    for name, (holder,) in _copies(answer).items():
        mine = where[active[name]]
        spread = common_depth(where[holder], mine)
        farther = [p for p in where if p != active[name] and common_depth(where[p], mine) < spread]
        assert all(load[p] >= cap for p in farther), (name, holder, farther)


@settings(max_examples=100, deadline=None)
@given(grouper_inputs(max_tasks=60, max_processors=10))
def test_standbys_are_sticky(data: GrouperInput) -> None:
    """The standbys of an answer, fed back as task_state with the same actives, stay."""
    grouper = get_grouper("host-affinity", standby_replicas=1)
    first = grouper.group(data.tasks, data.metadata)
    state: dict[str, dict[str, int]] = {}
    for container in first:
        for name in container.standby_tasks:
            state.setdefault(name, {})[container.processor_id] = 5
    again = replace(data.metadata, previous_task_to_processor=owners(first), task_state=state)
    second = grouper.group(data.tasks, again)
    assert actives(second) == actives(first)
    assert standbys_of(second) == standbys_of(first)


def test_standbys_stay_when_the_one_distant_processor_fills_late() -> None:
    """p-0 alone on another rack holds the copies of Partitions 3 and 7 (active on p-1, p-3).
    Partition 2's copy on p-3 must stay although p-0 has room when Partition 2 comes first:
    p-0's room goes to its own held copies (the check is on the final loads)."""
    locality = {"p-0": "zone-a/rack-1/host-1"} | {
        f"p-{i}": "zone-a/rack-0/host-0" for i in (1, 2, 3)
    }
    tasks = [task(n) for n in range(8)]
    grouper = get_grouper("host-affinity", standby_replicas=1)
    first = grouper.group(tasks, GrouperMetadata(locality, {}, {}))
    assert standbys_of(first) == {
        "p-0": ["Partition 3", "Partition 7"],
        "p-1": ["Partition 0", "Partition 5"],
        "p-2": ["Partition 1", "Partition 6"],
        "p-3": ["Partition 2", "Partition 4"],
    }
    state = {name: {pid: 5} for pid, names in standbys_of(first).items() for name in names}
    again = GrouperMetadata(locality, {}, owners(first), task_state=state)
    second = grouper.group(tasks, again)
    assert (actives(second), standbys_of(second)) == (actives(first), standbys_of(first))
    assert grouper.group(tasks, again) == second  # the same input, the same answer


def test_standbys_prefer_another_zone_and_never_share_a_processor() -> None:
    locality = {
        "a1": "zone-a/r1/h1",
        "a2": "zone-a/r2/h2",
        "b1": "zone-b/r1/h3",
        "b2": "zone-b/r1/h4",
    }
    tasks = [task(n) for n in range(8)]
    answer = get_grouper("host-affinity", standby_replicas=1).group(
        tasks, GrouperMetadata(locality, {}, {})
    )
    active = owners(answer)
    for name, (holder,) in _copies(answer).items():
        assert locality[holder].split("/")[0] != locality[active[name]].split("/")[0]
    assert sorted(len(c.standby_tasks) for c in answer) == [2, 2, 2, 2]
    two = get_grouper("host-affinity", standby_replicas=5).group(
        tasks, GrouperMetadata(locality, {}, {})
    )
    assert all(len(holders) == 3 for holders in _copies(two).values())


# ------------------------------------------------------------------------ failover


def test_lost_tasks_go_to_their_caught_up_copies() -> None:
    tasks = [task(n) for n in range(12)]
    live = {"p-0": "h0", "p-1": "h1", "p-2": "h2"}
    previous = {f"Partition {n}": f"p-{n % 4}" for n in range(12)}  # p-3 is gone
    lost = ["Partition 3", "Partition 7", "Partition 11"]
    state = {
        "Partition 3": {"p-2": 0, "p-0": 0},
        "Partition 7": {"p-0": 0},
        "Partition 11": {"p-2": 4, "p-1": 1},
    }
    metadata = GrouperMetadata(live, {}, previous, task_state=state)
    answer = owners(get_grouper("host-affinity", acceptable_recovery_lag=1).group(tasks, metadata))
    # The most lost tasks on a copy (a matching): Partition 3 yields p-0 to Partition 7.
    assert [answer[name] for name in lost] == ["p-2", "p-0", "p-1"]
    strict = owners(PLAIN.group(tasks, metadata))  # lag bound 0: Partition 11 has no copy
    assert (strict["Partition 3"], strict["Partition 7"]) == ("p-2", "p-0")


@pytest.mark.parametrize("num_tasks", [12, 24])
@pytest.mark.parametrize("hosts", list(itertools.permutations(["h2", "h3", "h4"])))
def test_each_processors_copies_split_evenly_so_a_loss_fails_over_warm(
    num_tasks: int, hosts: tuple[str, ...]
) -> None:
    """Whatever the order of processor ids against locations, one processor's standbys are
    split evenly over the others, so every task of a lost processor finds room at its copy."""
    tasks = [task(n) for n in range(num_tasks)]
    live = {f"exec-{i}": host for i, host in enumerate(hosts)}
    grouper = get_grouper("host-affinity", standby_replicas=1)
    first = grouper.group(tasks, GrouperMetadata(live, {}, {}))
    active = owners(first)
    copy_of = {name: c.processor_id for c in first for name in c.standby_tasks}
    for lost in live:
        split = Counter(copy_of[name] for name, pid in active.items() if pid == lost)
        assert max(split.values()) - min(split.values()) <= 1, (lost, split)
        survivors = {pid: loc for pid, loc in live.items() if pid != lost}
        state = {name: {copy_of[name]: 0} for name in active if copy_of[name] != lost}
        kept = {name: pid for name, pid in active.items() if pid != lost}
        metadata = GrouperMetadata(survivors, {}, kept, task_state=state)
        after = owners(grouper.group(tasks, metadata))
        orphans = [name for name, pid in active.items() if pid == lost]
        assert [n for n in orphans if after[n] != copy_of[n]] == [], lost


@st.composite
def failover_inputs(draw: st.DrawFn) -> tuple[GrouperInput, int]:
    data = draw(grouper_inputs(max_tasks=60, max_processors=8))
    live = sorted(data.metadata.processor_locality)
    state = {
        t.name: {
            pid: draw(st.integers(0, 3))
            for pid in draw(st.lists(st.sampled_from(live), max_size=2, unique=True))
        }
        for t in data.tasks
    }
    metadata = replace(data.metadata, task_state=state)
    return GrouperInput(data.tasks, metadata), draw(st.integers(0, 2))


@settings(max_examples=150, deadline=None)
@given(failover_inputs())
def test_failover_keeps_balance_and_movement_and_uses_copies(
    case: tuple[GrouperInput, int],
) -> None:
    data, lag = case
    grouper = get_grouper("host-affinity", acceptable_recovery_lag=lag)
    answer = grouper.group(data.tasks, data.metadata)
    validate(data.tasks, data.metadata, answer)
    blind = PLAIN.group(data.tasks, replace(data.metadata, task_state={}))
    assert Counter(len(c.tasks) for c in answer) == Counter(len(c.tasks) for c in blind) or (
        max(len(c.tasks) for c in answer) - min(len(c.tasks) for c in answer) <= 1
    )
    previous = data.metadata.previous_task_to_processor
    assert tasks_moved(previous, owners(answer)) == tasks_moved(previous, owners(blind))
    live = data.metadata.processor_locality
    lost = [t.name for t in data.tasks if previous.get(t.name) not in live]

    def on_copy(assignment: dict[str, str]) -> int:
        state = data.metadata.task_state
        return sum(state.get(n, {}).get(assignment[n], lag + 1) <= lag for n in lost)

    assert on_copy(owners(answer)) >= on_copy(owners(blind))


# ------------------------------------------------------------------------ conformance kit


def test_conformance_kit_with_replicas_and_capacity() -> None:
    grouper = get_grouper("host-affinity", standby_replicas=2, acceptable_recovery_lag=1)
    check_grouper(grouper, max_examples=40, hash_seeds=("7",), subprocess_examples=2)


def test_conformance_kit_rejects_a_standby_on_its_active() -> None:
    class Doubling:
        def group(self, tasks: list[TaskModel], metadata: GrouperMetadata) -> set[ContainerModel]:
            return {replace(c, standby_tasks=c.tasks) for c in PLAIN.group(tasks, metadata)}

    with pytest.raises(InvalidAssignment, match="has a standby on its active processor"):
        check_grouper(Doubling(), max_examples=5, hash_seeds=())


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"standby_replicas": 2},
        {"max_warmup_replicas": 2, "acceptable_recovery_lag": 1},
        {"max_warmup_replicas": 1, "standby_replicas": 1},
        {"max_moves_per_rebalance": 2},
        {"max_moves_per_rebalance": 1, "max_warmup_replicas": 3, "acceptable_recovery_lag": 2},
    ],
)
def test_replica_options_kit(options: dict[str, int]) -> None:
    grouper = get_grouper("host-affinity", **options)
    check_replica_options(grouper, max_examples=20, **options)
    check_grouper(grouper, max_examples=8, hash_seeds=(), subprocess_examples=0, virtual_examples=2)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_moves_per_rebalance": 1}, "tasks moved"),
        ({"max_warmup_replicas": 1}, "no caught-up copy"),
        ({"standby_replicas": 1}, "standby copies"),
    ],
)
def test_replica_options_kit_catches_a_grouper_that_ignores_them(
    options: dict[str, int], message: str
) -> None:
    with pytest.raises(AssertionError, match=message):
        check_replica_options(PLAIN, max_examples=100, shrink=False, **options)
