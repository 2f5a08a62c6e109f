"""host-affinity when task_state reports caught-up copies (issue 26).

1. Copies everywhere are no reason to lose spread: the failover phase serves lost tasks in spread
   order and leaves a task caught up on every live processor to the locality phases, so copies
   that single out no processor change no active task.
2. A move to a caught-up copy is taken before any warm-up is planned for that room: the warm-up's
   refill step (a maximum flow) and its top-up step.

The named scenarios come from the conformance kit (groupers.testing.copies), which plugin authors
run too; the properties below would have caught both bugs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_holdback import balance_moves, warmups
from test_spread import ssp_tasks

from groupers import GrouperMetadata, get_grouper, validate
from groupers.measures import balance_bounds, owners
from groupers.testing import GrouperInput, check_caught_up_scenarios, grouper_inputs
from groupers.testing.copies import (
    CAUGHT_UP_EVERYWHERE,
    FAR_BEHIND,
    WARMED_UP_ANSWER,
    caught_up_everywhere,
    kafka_tasks,
    warmed_up_copies,
)
from groupers.testing.oracles import stream_skew
from metadata.model import ContainerModel, SystemStreamPartition, TaskModel

ISSUE = {"acceptable_recovery_lag": 100, "max_warmup_replicas": 2}


def actives(containers: set[ContainerModel]) -> dict[str, list[str]]:
    return {c.processor_id: sorted(c.tasks) for c in containers}


# ------------------------------------------------------------------------ 1. spread


@pytest.mark.parametrize(("processors", "capacity"), CAUGHT_UP_EVERYWHERE)
def test_caught_up_everywhere_spreads_as_without_task_state(processors: int, capacity: int) -> None:
    scenario = caught_up_everywhere(processors, capacity)
    grouper = get_grouper("host-affinity", **ISSUE)
    answer = grouper.group(scenario.tasks, scenario.metadata)
    validate(scenario.tasks, scenario.metadata, answer)
    blind = grouper.group(scenario.tasks, replace(scenario.metadata, task_state={}))
    assert actives(answer) == actives(blind)
    assert stream_skew(scenario.tasks, scenario.metadata, answer) <= 1
    if processors == 3:
        assert actives(answer) == {
            "P1": ["0_0", "1_0", "2_0"],
            "P2": ["0_1", "1_1", "2_1"],
            "P3": ["0_2", "1_2", "2_2"],
        }


def test_failover_serves_lost_tasks_in_spread_order() -> None:
    """Copies on P1 and P2 only (P3 has none): the matching still deals the streams, P1 and P2
    each take a run of the spread order, P3 the rest."""
    scenario = caught_up_everywhere(3, 1)
    state = {name: {"P1": 10, "P2": 10, "P3": 500} for name in scenario.metadata.task_state}
    metadata = replace(scenario.metadata, task_state=state)
    answer = actives(get_grouper("host-affinity", **ISSUE).group(scenario.tasks, metadata))
    assert answer == {
        "P1": ["0_0", "1_0", "2_0"],
        "P2": ["0_1", "1_1", "2_1"],
        "P3": ["0_2", "1_2", "2_2"],
    }


def test_failover_prefers_the_holder_at_the_lost_tasks_location() -> None:
    tasks = kafka_tasks(1, 2)
    live = {"P1": "zone-a/host-1", "P2": "zone-b/host-2", "P3": "zone-c/host-3"}
    metadata = GrouperMetadata(
        live,
        {"0_0": "zone-b/host-9", "0_1": "zone-c/host-9"},
        {"0_0": "gone", "0_1": "gone"},
        task_state={"0_0": {"P1": 0, "P2": 0}, "0_1": {"P1": 0, "P3": 0}},
    )
    answer = owners(get_grouper("host-affinity").group(tasks, metadata))
    assert answer == {"0_0": "P2", "0_1": "P3"}


# ------------------------------------------------------------------------ 2. free moves first


@pytest.mark.parametrize(
    ("ids", "streams", "recorded"),
    [
        (("P1", "P2", "P3"), True, True),  # the issue's scenario
        (("P1", "P2", "P3"), False, True),  # one stream: name order
        (("P1", "P2", "P3"), False, False),  # no recorded locations
        (("c", "b", "a"), True, True),  # the source sorts last
        (("b", "c", "a"), True, False),
        (("c", "a", "b"), True, False),
    ],
)
def test_a_move_to_a_caught_up_copy_comes_before_a_warm_up(
    ids: tuple[str, str, str], streams: bool, recorded: bool
) -> None:
    """P1 ran 0_0, 0_1, 1_0, 1_1; P2 holds a caught-up copy of 0_1, P3 one of 1_0: balance is
    reached by moving them there, and no warm-up replica is planned."""
    scenario = warmed_up_copies()
    rename = dict(zip(("P1", "P2", "P3"), ids, strict=True))
    tasks = scenario.tasks
    if not streams:
        tasks = [
            TaskModel(t.name, frozenset({SystemStreamPartition("kafka", "topic", i)}), i)
            for i, t in enumerate(tasks)
        ]
    md = scenario.metadata
    metadata = GrouperMetadata(
        {rename[p]: loc for p, loc in md.processor_locality.items()},
        dict(md.task_locality) if recorded else {},
        {n: rename[p] for n, p in md.previous_task_to_processor.items()},
        processor_capacity={rename[p]: c for p, c in md.processor_capacity.items()},
        task_state={n: {rename[p]: lag for p, lag in c.items()} for n, c in md.task_state.items()},
    )
    answer = get_grouper("host-affinity", **ISSUE).group(tasks, metadata)
    validate(tasks, metadata, answer)
    assert actives(answer) == {rename[p]: names for p, names in WARMED_UP_ANSWER.items()}
    assert warmups(answer) == {}


def test_warm_up_still_waits_where_no_copy_is_caught_up() -> None:
    """The same scenario with P3's copy far behind: 0_1 goes to P2, a task waits for P3 with a
    warm-up replica there (the rule of issue 13 is unchanged)."""
    scenario = warmed_up_copies()
    state = dict(scenario.metadata.task_state) | {"1_0": {"P1": 0, "P2": FAR_BEHIND, "P3": 900}}
    metadata = replace(scenario.metadata, task_state=state)
    answer = get_grouper("host-affinity", **ISSUE).group(scenario.tasks, metadata)
    assert actives(answer)["P2"] == ["0_1"] and actives(answer)["P3"] == []
    (name, target), *rest = warmups(answer).items()
    assert rest == [] and target == "P3" and owners(answer)[name] == "P1"


def test_a_processor_below_its_lower_bound_takes_a_caught_up_copy_from_another() -> None:
    """Balance moves two of P1's tasks to the new P3, which holds no copy of them; P2 keeps three
    (above its lower bound of two) and one of them has a caught-up copy on P3: that one moves,
    so P3 is not left empty, and one of P1's tasks waits for P3 with a warm-up replica."""
    tasks = kafka_tasks(1, 8)
    live = {"P1": "h1", "P2": "h2", "P3": "h3"}
    previous = {f"0_{p}": "P1" for p in range(5)} | {f"0_{p}": "P2" for p in range(5, 8)}
    metadata = GrouperMetadata(
        live,
        {n: live[p] for n, p in previous.items()},
        previous,
        task_state={"0_6": {"P2": 0, "P3": 0}},
    )
    plain = owners(get_grouper("host-affinity").group(tasks, metadata))
    assert Counter(plain.values()) == {"P1": 3, "P2": 3, "P3": 2}
    assert plain["0_6"] == "P2"
    answer = get_grouper("host-affinity", **ISSUE).group(tasks, metadata)
    assert owners(answer)["0_6"] == "P3"
    assert Counter(owners(answer).values()) == {"P1": 5, "P2": 2, "P3": 1}
    ((name, target),) = warmups(answer).items()
    assert target == "P3" and previous[name] == "P1" == owners(answer)[name]


# ------------------------------------------------------------------------ the kit


def test_the_kit_passes_host_affinity() -> None:
    for options in (ISSUE, {"acceptable_recovery_lag": 0}, {"max_warmup_replicas": 1}):
        check_caught_up_scenarios(get_grouper("host-affinity", **options), **options)


class _Fixed:
    """A grouper that gives one fixed answer (actives and standbys) for the scenario it is for,
    and host-affinity's otherwise."""

    def __init__(self, active: dict[str, list[str]], standby: dict[str, list[str]]) -> None:
        self.active, self.standby = active, standby

    def group(self, tasks: list[TaskModel], metadata: GrouperMetadata) -> set[ContainerModel]:
        by_name = {t.name: t for t in tasks}
        if not metadata.task_state or set(by_name) != {
            n for ns in self.active.values() for n in ns
        }:
            return get_grouper("host-affinity").group(tasks, metadata)
        return {
            ContainerModel(
                pid,
                metadata.processor_locality[pid],
                {n: by_name[n] for n in self.active[pid]},
                {n: by_name[n] for n in self.standby.get(pid, [])},
            )
            for pid in metadata.processor_locality
        }


def test_the_kit_catches_both_wrong_answers_of_the_issue() -> None:
    streams_apart = _Fixed(
        {"P1": ["0_0", "0_1", "0_2"], "P2": ["1_0", "1_1", "1_2"], "P3": ["2_0", "2_1", "2_2"]},
        {},
    )
    with pytest.raises(AssertionError, match="spread 3 tasks unevenly"):
        check_caught_up_scenarios(streams_apart, **ISSUE)
    warm_up_over_free_move = _Fixed(
        {"P1": ["0_0", "1_0", "1_1"], "P2": ["0_1"], "P3": []}, {"P3": ["1_1"]}
    )
    with pytest.raises(AssertionError, match="no warm-up needed"):
        check_caught_up_scenarios(warm_up_over_free_move, **ISSUE)
    extra_copy = _Fixed(WARMED_UP_ANSWER, {"P3": ["1_1"]})
    with pytest.raises(AssertionError, match=r"warm-up replicas planned for \['1_1'\]"):
        check_caught_up_scenarios(extra_copy, **ISSUE)


# ------------------------------------------------------------------------ properties


@st.composite
def symmetric_copies(draw: st.DrawFn) -> tuple[GrouperInput, int, bool]:
    """Inputs with several streams and capacities whose copies single out no processor: each task
    is caught up on every live processor (lags drawn up to the bound) or on none (lags beyond
    it), sometimes with copies on vanished processors too. The bool: every task caught up."""
    data = draw(grouper_inputs(max_tasks=30, max_processors=6, replicas=True, streams=3))
    lag = draw(st.integers(0, 3))
    live = sorted(data.metadata.processor_locality)
    every = draw(st.booleans())
    state: dict[str, dict[str, int]] = {}
    for task in data.tasks:
        if not draw(st.booleans()):
            continue
        behind = not every and draw(st.booleans())
        low, high = (lag + 1, lag + 5) if behind else (0, lag)
        copies = {pid: draw(st.integers(low, high)) for pid in live}
        if draw(st.booleans()):
            copies["gone-0"] = draw(st.integers(0, lag + 5))
        state[task.name] = copies
    if every:
        state = {t.name: state.get(t.name, dict.fromkeys(live, 0)) for t in data.tasks}
    return GrouperInput(data.tasks, replace(data.metadata, task_state=state)), lag, every


@settings(max_examples=200, deadline=None)
@given(symmetric_copies(), st.integers(1, 3))
def test_copies_that_single_out_no_processor_change_no_active(
    case: tuple[GrouperInput, int, bool], most: int
) -> None:
    """The answer with such copies is the answer without task_state (which test_spread and
    test_host_affinity check against the oracles): spread, moves and locality included. With
    warm-up, when every task is caught up everywhere (no move waits)."""
    data, lag, every = case
    warm = most if every else 0
    grouper = get_grouper("host-affinity", acceptable_recovery_lag=lag, max_warmup_replicas=warm)
    answer = grouper.group(data.tasks, data.metadata)
    validate(data.tasks, data.metadata, answer)
    blind = get_grouper("host-affinity", acceptable_recovery_lag=lag).group(
        data.tasks, replace(data.metadata, task_state={})
    )
    assert actives(answer) == actives(blind)
    assert warmups(answer) == {}


@st.composite
def fresh_with_copies(draw: st.DrawFn) -> tuple[list[TaskModel], GrouperMetadata, int]:
    """A fresh assignment (no history) of equal streams on equal processors; every task caught
    up on the same drawn set of processors (possibly none or all)."""
    streams, partitions = draw(st.integers(2, 4)), draw(st.integers(1, 6))
    count = draw(st.integers(2, 5))
    tasks = ssp_tasks(streams, partitions)
    live = {f"p-{i}": f"host-{i}" for i in range(count)}
    holders = draw(st.lists(st.sampled_from(sorted(live)), unique=True))
    lag = draw(st.integers(0, 3))
    state = {t.name: {pid: draw(st.integers(0, lag)) for pid in holders} for t in tasks}
    capacity = dict.fromkeys(live, draw(st.integers(1, 9)))
    return tasks, GrouperMetadata(live, {}, {}, {}, capacity, state), lag


@settings(max_examples=200, deadline=None)
@given(fresh_with_copies(), st.integers(0, 2))
def test_fresh_assignments_spread_every_stream_whatever_the_copies(
    case: tuple[list[TaskModel], GrouperMetadata, int], most: int
) -> None:
    """Per-stream skew <= 1 (what balance allows for equal streams on equal processors), the
    same as without task_state, wherever the copies are (as long as every task's are on the
    same processors: copies that differ per stream must win over spread, DESIGN.md)."""
    tasks, metadata, lag = case
    grouper = get_grouper("host-affinity", acceptable_recovery_lag=lag, max_warmup_replicas=most)
    answer = grouper.group(tasks, metadata)
    validate(tasks, metadata, answer)
    assert stream_skew(tasks, metadata, answer) <= 1, actives(answer)
    blind = grouper.group(tasks, replace(metadata, task_state={}))
    assert stream_skew(tasks, metadata, blind) <= 1


@st.composite
def with_copies(draw: st.DrawFn) -> tuple[GrouperInput, int, int, int]:
    """Any inputs (several streams, capacities), copies with lags 0 to 3 on some processors."""
    data = draw(
        grouper_inputs(max_tasks=40, max_processors=6, min_processors=2, replicas=True, streams=2)
    )
    live = sorted(data.metadata.processor_locality)
    state = {
        t.name: {
            pid: draw(st.integers(0, 3))
            for pid in draw(st.lists(st.sampled_from(live), max_size=3, unique=True))
        }
        for t in data.tasks
        if draw(st.booleans())
    }
    return (
        GrouperInput(data.tasks, replace(data.metadata, task_state=state)),
        draw(st.integers(1, 4)),
        draw(st.integers(0, 2)),
        draw(st.integers(0, 1)),
    )


def _caught_up(md: GrouperMetadata, name: str, pid: str, lag: int) -> bool:
    return md.task_state.get(name, {}).get(pid, lag + 1) <= lag


@settings(max_examples=250, deadline=None)
@given(with_copies())
def test_no_processor_waits_below_its_lower_bound_for_a_free_move(
    case: tuple[GrouperInput, int, int, int],
) -> None:
    """With warm-up: a processor below its lower bound has no task with a caught-up copy on it
    staying on a processor that could spare it (above its own lower bound); and a warm-up
    replica is planned on a processor only if no task with a caught-up copy there stays on a
    processor over its balanced share."""
    data, most, lag, slack = case
    md = data.metadata
    options = {"acceptable_recovery_lag": lag, "balance_slack": slack}
    grouper = get_grouper("host-affinity", max_warmup_replicas=most, **options)
    containers = grouper.group(data.tasks, md)
    validate(data.tasks, md, containers)
    answer = owners(containers)
    plan = Counter(owners(get_grouper("host-affinity", **options).group(data.tasks, md)).values())
    lower, _ = balance_bounds(sorted(md.processor_locality), len(data.tasks), md, slack)
    counts = Counter(answer.values())
    previous = md.previous_task_to_processor
    staying = [(n, p) for n, p in answer.items() if previous.get(n) == p]
    for target in md.processor_locality:
        free = [(n, p) for n, p in staying if p != target and _caught_up(md, n, target, lag)]
        if counts[target] < lower[target]:
            assert all(counts[p] <= lower[p] for _, p in free), (target, free, counts)
    for name, target in warmups(containers).items():
        free = [(n, p) for n, p in staying if p != target and _caught_up(md, n, target, lag)]
        assert all(counts[p] <= plan[p] for _, p in free), (name, target, free, counts, plan)
        assert not _caught_up(md, name, target, lag)
    for name in balance_moves(md, answer):  # still: moves only to caught-up copies
        assert _caught_up(md, name, answer[name], lag), name


@settings(max_examples=100, deadline=None)
@given(with_copies())
def test_warm_up_converges_once_the_warm_up_replicas_catch_up(
    case: tuple[GrouperInput, int, int, int],
) -> None:
    """Feed each answer back (as the previous assignment, its warm-up replicas caught up): the
    moves end, at a balanced answer."""
    data, most, lag, _ = case
    md = data.metadata
    grouper = get_grouper("host-affinity", max_warmup_replicas=most, acceptable_recovery_lag=lag)
    where = md.processor_locality
    answer: dict[str, str] = {}
    state = {name: dict(copies) for name, copies in md.task_state.items()}
    for _ in range(len(data.tasks) + 2):
        containers = grouper.group(data.tasks, md)
        for name, target in warmups(containers).items():
            state.setdefault(name, {})[target] = 0
        answer = owners(containers)
        md = replace(
            md,
            previous_task_to_processor=answer,
            task_locality={n: where[p] for n, p in answer.items()},
            task_state=state,
        )
    lower, upper = balance_bounds(sorted(where), len(data.tasks), md, 0)
    counts = Counter(answer.values())
    assert all(lower[p] <= counts[p] <= upper[p] for p in where), counts


def test_symmetric_copies_strategy_draws_both_kinds() -> None:
    """The property above sees tasks caught up everywhere and tasks caught up nowhere."""
    seen: set[bool] = set()

    @settings(max_examples=60, deadline=None)
    @given(symmetric_copies())
    def collect(case: tuple[GrouperInput, int, bool]) -> None:
        data, lag, _ = case
        live = set(data.metadata.processor_locality)
        for copies in data.metadata.task_state.values():
            seen.add(all(copies[p] <= lag for p in live))

    collect()
    assert seen == {True, False}
