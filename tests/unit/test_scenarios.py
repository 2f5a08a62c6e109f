"""The scenario library itself: builders, the lower bound, the locality oracle, measure()."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Collection

import pytest

from groupers import GrouperMetadata, get_grouper, measures
from groupers.matching import max_flow, max_flow_bipartite
from groupers.testing import oracles
from groupers.testing import scenarios as sc
from metadata.model import ContainerModel, FrozenMap, TaskModel


def tasks(count: int) -> list[TaskModel]:
    return sc.make_tasks(count)


def containers(
    owner: dict[str, str], live: dict[str, str], items: list[TaskModel]
) -> set[ContainerModel]:
    by_name = {t.name: t for t in items}
    mine: dict[str, dict[str, TaskModel]] = {pid: {} for pid in live}
    for name, pid in owner.items():
        mine[pid][name] = by_name[name]
    return {ContainerModel(pid, live[pid], FrozenMap(t)) for pid, t in mine.items()}


def brute_force(items: list[TaskModel], md: GrouperMetadata) -> tuple[int, int]:
    """(fewest moves, best locality at fewest moves) over EVERY balanced assignment.

    Exponential: only for a handful of tasks. Independent of both the formulas and the flow.
    """
    names = sorted(t.name for t in items)
    pids = sorted(md.processor_locality)
    floor, extra = divmod(len(names), len(pids))
    best: tuple[int, int] | None = None
    for choice in itertools.product(pids, repeat=len(names)):
        sizes = Counter(choice)
        counts = [sizes.get(pid, 0) for pid in pids]
        if (
            any(c not in (floor, floor + 1) for c in counts)
            or sum(c > floor for c in counts) != extra
        ):
            continue
        moves = sum(
            md.previous_task_to_processor.get(n) != p for n, p in zip(names, choice, strict=True)
        )
        local = sum(
            md.task_locality.get(n) == md.processor_locality[p]
            for n, p in zip(names, choice, strict=True)
        )
        key = (moves, -local)
        if best is None or key < best:
            best = key
    assert best is not None
    return best[0], -best[1]


# -------------------------------------------------------------------------- lower bound, by hand


def test_lower_bound_one_joins_two_with_ten_tasks_is_three() -> None:
    # 5 + 5 on two processors; a third joins: targets 4, 3, 3 -> 1 + 2 shed, the new one takes 3.
    state = sc.steady_state(10, 2)
    md = GrouperMetadata(
        {**state.processor_locality, "p-0009": "host-0009"}, state.task_locality, state.assignment
    )
    assert oracles.movement_lower_bound(state.tasks, md) == 3


def test_lower_bound_one_of_three_leaves() -> None:
    # 10 tasks on 3 processors: 4, 3, 3. The one with 3 (p-0001) leaves: its 3 move, and
    # the survivors' 4 + 3 fit in targets 5 + 5.
    state = sc.steady_state(10, 3)
    assert Counter(state.assignment.values()) == {"p-0000": 4, "p-0001": 3, "p-0002": 3}
    live = {k: v for k, v in state.processor_locality.items() if k != "p-0001"}
    md = GrouperMetadata(live, state.task_locality, state.assignment)
    assert oracles.movement_lower_bound(state.tasks, md) == 3
    # The one with 4 leaves instead: 4 move (3 + 3 survivors take 2 each).
    live = {k: v for k, v in state.processor_locality.items() if k != "p-0000"}
    md = GrouperMetadata(live, state.task_locality, state.assignment)
    assert oracles.movement_lower_bound(state.tasks, md) == 4


def test_lower_bound_ceil_targets_go_to_the_fullest_survivors() -> None:
    # Survivors hold 6, 2, 2 (10 tasks), P = 3 -> targets 4, 3, 3: only the 6 sheds (2).
    items = tasks(10)
    prev = {t.name: ("a" if i < 6 else "b" if i < 8 else "c") for i, t in enumerate(items)}
    md = GrouperMetadata({"a": "h1", "b": "h2", "c": "h3"}, {}, prev)
    assert oracles.movement_lower_bound(items, md) == 2
    # Four processors (targets 3, 3, 2, 2), survivors 6, 2, 2 and a new one: 6 sheds 3, nobody else.
    md = GrouperMetadata({"a": "h1", "b": "h2", "c": "h3", "d": "h4"}, {}, prev)
    assert oracles.movement_lower_bound(items, md) == 3


def test_lower_bound_counts_new_tasks_and_tasks_of_unknown_processors() -> None:
    items = tasks(6)
    prev = {"Partition 0": "a", "Partition 1": "a", "Partition 2": "gone", "Partition 3": "b"}
    md = GrouperMetadata({"a": "h1", "b": "h2"}, {}, prev)
    # 1 orphan (gone) + 2 new tasks (4, 5); a keeps 2, b keeps 1 -> targets 3, 3: no shedding.
    assert oracles.movement_lower_bound(items, md) == 3
    assert oracles.movement_lower_bound([], md) == 0


def test_lower_bound_with_more_processors_than_tasks() -> None:
    items = tasks(3)
    prev = {t.name: "a" for t in items}
    md = GrouperMetadata({pid: "h" for pid in "abcde"}, {}, prev)
    assert oracles.movement_lower_bound(items, md) == 2  # a keeps one (target ceil = 1)


def test_lower_bound_without_processors_is_an_error() -> None:
    with pytest.raises(ValueError, match="no live processor"):
        oracles.movement_lower_bound(tasks(3), GrouperMetadata({}, {}, {}))


@pytest.mark.parametrize("per_location", [1, 10])
def test_lower_bounds_of_the_named_scenarios(per_location: int) -> None:
    t, p = 10_000, 100
    assert (
        oracles.movement_lower_bound(*_pair(sc.one_leaves(t, p, per_location=per_location))) == 100
    )
    # 10000 / 101 = 99 r 1: 99 survivors shed 1 each; the new one takes 99.
    assert oracles.movement_lower_bound(*_pair(sc.one_joins(t, p, per_location=per_location))) == 99
    # 100 -> 130: 10000 / 130 = 76 r 120, so all 100 survivors may keep 77: each sheds 23.
    assert (
        oracles.movement_lower_bound(*_pair(sc.scale(t, p, per_location=per_location))) == 100 * 23
    )
    # The numbers: one of 1,000 joins -> 9 must move; one of 100 dies -> 100 must move.
    assert oracles.movement_lower_bound(*_pair(sc.one_joins(t, 1000))) == 9


def _pair(scenario: sc.Scenario) -> tuple[list[TaskModel], GrouperMetadata]:
    return scenario.tasks, scenario.metadata


@pytest.mark.parametrize("seed", range(40))
def test_lower_bound_and_oracle_match_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    n_tasks = rng.randint(1, 7)
    items = tasks(n_tasks)
    live = {f"p{i}": f"h{rng.randint(0, 2)}" for i in range(rng.randint(1, 3))}
    old = [*live, "gone1", "gone2"]
    prev = {t.name: rng.choice(old) for t in items if rng.random() < 0.85}
    loc = {t.name: f"h{rng.randint(0, 3)}" for t in items if rng.random() < 0.8}
    md = GrouperMetadata(live, loc, prev)
    moves, local = brute_force(items, md)
    assert oracles.movement_lower_bound(items, md) == moves
    assert oracles.best_locality_exact(items, md) == local
    assert oracles.best_locality(items, md) == local  # small: exact by default
    assert oracles.locality_upper_bound(items, md) >= local


# ------------------------------------------------------------------------ best locality, by hand


def test_best_locality_prefers_movement_over_locality() -> None:
    # Two tasks on p-a (host-a) but both were last seen at host-b; p-b is empty. Balance moves one;
    # the best answer moves one to p-b (local) and keeps the other on p-a (not local): 1.
    items = tasks(2)
    md = GrouperMetadata(
        {"p-a": "host-a", "p-b": "host-b"},
        {"Partition 0": "host-b", "Partition 1": "host-b"},
        {"Partition 0": "p-a", "Partition 1": "p-a"},
    )
    assert oracles.best_locality_exact(items, md) == 1
    assert oracles.locality_upper_bound(items, md) == 1


def test_best_locality_where_minimal_movement_costs_locality() -> None:
    # p-a (host-a) holds 2 tasks recorded at host-b; p-b (host-b) holds 2 recorded at host-a.
    # Swapping would make all 4 local, but stickiness wins: nothing moves and nothing is local.
    items = tasks(4)
    md = GrouperMetadata(
        {"p-a": "host-a", "p-b": "host-b"},
        {
            "Partition 0": "host-b",
            "Partition 1": "host-b",
            "Partition 2": "host-a",
            "Partition 3": "host-a",
        },
        {"Partition 0": "p-a", "Partition 1": "p-a", "Partition 2": "p-b", "Partition 3": "p-b"},
    )
    assert oracles.movement_lower_bound(items, md) == 0
    assert oracles.best_locality_exact(items, md) == 0
    assert oracles.locality_upper_bound(items, md) == 4  # the cheap bound ignores movement


def test_best_locality_respects_balance_at_a_crowded_location() -> None:
    # 6 orphans, all recorded at host-a, which has one of three processors: only 2 can be local.
    items = tasks(6)
    md = GrouperMetadata(
        {"p-1": "host-a", "p-2": "host-b", "p-3": "host-c"},
        {t.name: "host-a" for t in items},
        {},
    )
    assert oracles.best_locality_exact(items, md) == 2
    assert oracles.locality_upper_bound(items, md) == 2


def test_best_locality_gives_the_ceil_place_where_it_buys_locality() -> None:
    # 7 orphans over 3 processors (3, 2, 2): 4 recorded at host-a -> the 3 goes there; 3 at host-b.
    items = tasks(7)
    loc = {t.name: ("host-a" if i < 4 else "host-b") for i, t in enumerate(items)}
    md = GrouperMetadata({"p-1": "host-a", "p-2": "host-b", "p-3": "host-c"}, loc, {})
    assert oracles.best_locality_exact(items, md) == 3 + 2
    assert oracles.locality_upper_bound(items, md) == 5


def test_best_locality_when_minimal_movement_forces_the_ceil_place() -> None:
    # T=7, P=3 -> targets 3, 2, 2. p (host-l) holds 3, s (host-m) holds 2, q (host-l) is new;
    # two orphans are recorded at host-m. Minimal movement (2) gives the ceil to p, so both
    # orphans land on q (host-l): 5 local. Giving the ceil to s would make 6 local but move 3.
    items = tasks(7)
    prev = {t.name: "p" for t in items[:3]} | {t.name: "s" for t in items[3:5]}
    loc = {t.name: "host-l" for t in items[:3]} | {t.name: "host-m" for t in items[3:]}
    md = GrouperMetadata({"p": "host-l", "q": "host-l", "s": "host-m"}, loc, prev)
    assert oracles.movement_lower_bound(items, md) == 2
    assert oracles.best_locality_exact(items, md) == 5
    assert oracles.best_locality_and_method(items, md) == (5, "closed form")
    assert (
        oracles.locality_upper_bound(items, md) == 6
    )  # the movement-blind bound is not exact here
    assert brute_force(items, md) == (2, 5)


def test_best_locality_methods() -> None:
    scenario = sc.one_leaves(100, 7, per_location=2)
    assert oracles.best_locality_and_method(scenario.tasks, scenario.metadata)[1] == "closed form"
    assert oracles.best_locality_and_method(scenario.tasks, scenario.metadata, exact=False)[1] == (
        "upper bound"
    )
    items = tasks(4)
    swap = GrouperMetadata(
        {"p-a": "host-a", "p-b": "host-b"},
        {"Partition 0": "host-b", "Partition 1": "host-a"},
        {"Partition 0": "p-a", "Partition 1": "p-b"},
    )
    assert oracles.best_locality_and_method(items, swap) == (0, "flow")


@pytest.mark.parametrize("seed", range(300))
def test_closed_form_matches_the_flow_on_consistent_instances(seed: int) -> None:
    rng = random.Random(seed)
    hosts = [f"z{rng.randint(0, 1)}/h{h}" for h in range(rng.randint(1, 4))]
    live = {f"p{i}": rng.choice(hosts) for i in range(rng.randint(1, 7))}
    old = [*live, "gone"]
    items = tasks(rng.randint(0, 50))
    prev: dict[str, str] = {}
    loc: dict[str, str] = {}
    for t in items:
        if rng.random() < 0.9:
            prev[t.name] = rng.choice(old)
        owner = prev.get(t.name)
        if owner in live:
            loc[t.name] = live[owner]  # consistent: recorded where its live processor is
        elif rng.random() < 0.8:
            loc[t.name] = rng.choice([*hosts, "elsewhere"])
    md = GrouperMetadata(live, loc, prev)
    value, method = oracles.best_locality_and_method(items, md)
    assert method == "closed form"
    assert value == oracles.best_locality_exact(items, md)
    assert value <= oracles.locality_upper_bound(items, md)


def test_best_locality_ignores_unknown_and_missing_locations() -> None:
    items = tasks(3)
    md = GrouperMetadata(
        {"p-1": "host-a"},
        {"Partition 0": "host-z", "Partition 1": "host-a"},
        {"Partition 2": "p-1"},
    )
    assert oracles.best_locality_exact(items, md) == 1
    assert oracles.locality_upper_bound(items, md) == 1


# ----------------------------------------------------------------------------- measure


def test_measure_counts_moves_locality_and_balance() -> None:
    items = tasks(5)
    live = {"p-1": "host-a", "p-2": "host-b", "p-3": "host-b"}
    md = GrouperMetadata(
        live,
        {
            "Partition 0": "host-a",
            "Partition 1": "host-b",
            "Partition 2": "host-a",
            "Partition 3": "host-c",
        },
        {"Partition 0": "p-1", "Partition 1": "p-1", "Partition 2": "gone", "Partition 3": "p-3"},
    )
    owner = {
        "Partition 0": "p-1",  # stays, local
        "Partition 1": "p-2",  # moves, local (host-b)
        "Partition 2": "p-1",  # moves (orphan), local
        "Partition 3": "p-1",  # moves, not local (host-c)
        "Partition 4": "p-2",  # new task: moved; no locality
    }
    m = oracles.measure(items, md, containers(owner, live, items))
    assert (m.moved, m.locality_kept, m.max_minus_min) == (4, 3, 3)  # sizes 3, 2, 0
    assert (m.tasks, m.processors, m.steps) == (5, 3, 1)
    assert m.lower_bound == oracles.movement_lower_bound(items, md)
    assert m.locality_best == oracles.best_locality_exact(items, md) and m.locality_exact
    assert not oracles.measure(
        items, md, containers(owner, live, items), exact=False
    ).locality_exact
    assert m.extra_moves == m.moved - m.lower_bound


def test_measure_counts_unassigned_tasks_as_moved_and_missing_containers_as_empty() -> None:
    items = tasks(2)
    live = {"p-1": "host-a", "p-2": "host-b"}
    md = GrouperMetadata(
        live, {"Partition 0": "host-a"}, {"Partition 0": "p-1", "Partition 1": "p-1"}
    )
    partial = {ContainerModel("p-1", "host-a", FrozenMap({"Partition 0": items[0]}))}
    m = oracles.measure(items, md, partial)
    assert (m.moved, m.locality_kept, m.max_minus_min) == (1, 1, 1)


def test_combine_sums_steps_and_keeps_the_worst_balance() -> None:
    a = oracles.Metrics(10, 2, 3, 2, 7, 8, True, 1)
    b = oracles.Metrics(10, 2, 1, 1, 9, 9, False, 0)
    total = oracles.combine([a, b])
    assert (total.moved, total.lower_bound, total.locality_kept, total.locality_best) == (
        4,
        3,
        16,
        17,
    )
    assert (total.max_minus_min, total.steps, total.locality_exact) == (1, 2, False)


# ----------------------------------------------------------------------------- builders


def test_steady_state_is_balanced_and_local() -> None:
    state = sc.steady_state(103, 10, per_location=4)
    sizes = Counter(state.assignment.values())
    assert len(sizes) == 10 and max(sizes.values()) - min(sizes.values()) == 1
    assert set(state.processor_locality.values()) == {"host-0000", "host-0001", "host-0002"}
    for name, pid in state.assignment.items():
        assert state.task_locality[name] == state.processor_locality[pid]
    assert state.tasks[7].name == "Partition 7"
    assert {(s.system, s.stream, s.partition) for s in state.tasks[7].partitions} == {
        ("kafka", "events", 7)
    }


def test_hierarchical_locations() -> None:
    assert sc.location_id(7, hierarchical=True) == "zone-b/rack-02/host-0007"
    state = sc.steady_state(30, 6, hierarchical=True)
    zones = {loc.split("/")[0] for loc in state.processor_locality.values()}
    assert zones == {"zone-a", "zone-b", "zone-c"}


def test_scenario_builders_change_only_the_live_processors() -> None:
    leaves = sc.one_leaves(100, 10)
    assert set(leaves.before.processor_locality) - set(leaves.metadata.processor_locality) == {
        "p-0005"
    }
    joins = sc.one_joins(100, 10)
    assert set(joins.metadata.processor_locality) - set(joins.before.processor_locality) == {
        "p-0010"
    }
    assert joins.metadata.processor_locality["p-0010"] not in set(
        joins.before.processor_locality.values()
    )
    joins10 = sc.one_joins(100, 20, per_location=10)
    assert joins10.metadata.processor_locality["p-0020"] == "host-0000"  # an existing location
    grown = sc.scale(100, 10)
    assert len(grown.metadata.processor_locality) == 13
    grown10 = sc.scale(1000, 100, per_location=10)
    new = set(grown10.metadata.processor_locality) - set(grown10.before.processor_locality)
    assert len(new) == 30
    assert Counter(grown10.metadata.processor_locality[p] for p in new) == {
        "host-0010": 10,
        "host-0011": 10,
        "host-0012": 10,
    }
    for s in (leaves, joins, grown):
        assert s.metadata.previous_task_to_processor == s.before.previous_task_to_processor
        assert s.metadata.task_locality == s.before.task_locality
    with pytest.raises(ValueError, match="unknown scenario"):
        sc.build("meteor-strike", 10, 2)


def test_rolling_restart_replaces_at_the_same_location() -> None:
    restart = sc.rolling_restart(40, 4, per_location=2)
    assert restart.replacements == [
        ("p-0000", "p-0004"),
        ("p-0001", "p-0005"),
        ("p-0002", "p-0006"),
        ("p-0003", "p-0007"),
    ]
    sample = sc.rolling_restart(40, 4, sample=2)
    assert len(sample.replacements) == 2 and "2 of 4" in sample.name


class _Trivial:
    """Round-robin over processors in id order, ignoring history (a stand-in grouper)."""

    def group(self, items: Collection[TaskModel], metadata: GrouperMetadata) -> set[ContainerModel]:
        pids = sorted(metadata.processor_locality)
        owner = {
            t.name: pids[i % len(pids)] for i, t in enumerate(sorted(items, key=lambda t: t.name))
        }
        return containers(owner, dict(metadata.processor_locality), list(items))


def test_run_rolling_restart_feeds_each_answer_to_the_next_step() -> None:
    restart = sc.rolling_restart(12, 3, hierarchical=True)
    seen: list[GrouperMetadata] = []

    class Spy(_Trivial):
        def group(
            self, items: Collection[TaskModel], metadata: GrouperMetadata
        ) -> set[ContainerModel]:
            seen.append(metadata)
            return super().group(items, metadata)

    result = sc.run_rolling_restart(Spy(), restart)
    assert len(seen) == len(result.steps) == len(result.seconds) == 3
    assert sorted(seen[0].processor_locality) == ["p-0001", "p-0002", "p-0003"]
    assert seen[0].processor_locality["p-0003"] == restart.before.processor_locality["p-0000"]
    assert sorted(seen[2].processor_locality) == ["p-0003", "p-0004", "p-0005"]
    # step 2's previous assignment is step 1's answer, its locality where step 1 put each task
    first = _Trivial().group(restart.tasks, seen[0])
    owner = {n: c.processor_id for c in first for n in c.tasks}
    assert dict(seen[1].previous_task_to_processor) == owner
    assert all(seen[1].task_locality[n] == seen[0].processor_locality[p] for n, p in owner.items())
    assert result.total.moved == sum(m.moved for m in result.steps)
    assert result.total.lower_bound == sum(m.lower_bound for m in result.steps) == 3 * 4


def test_rebased_starts_from_another_layout() -> None:
    scenario = sc.one_leaves(12, 3)
    start = GrouperMetadata(scenario.before.processor_locality, {}, {})
    layout = _Trivial().group(scenario.tasks, start)
    moved = sc.rebased(scenario, layout)
    owner = {n: c.processor_id for c in layout for n in c.tasks}
    assert dict(moved.metadata.previous_task_to_processor) == owner
    assert moved.metadata.processor_locality == scenario.metadata.processor_locality
    restart = sc.rebased(sc.rolling_restart(12, 3), layout)
    assert dict(restart.before.previous_task_to_processor) == owner


# ----------------------------------------------------------------------------- the bounds agree


@pytest.mark.parametrize("hierarchical", [False, True])
@pytest.mark.parametrize("per_location", [1, 10])
@pytest.mark.parametrize("kind", ["one-leaves", "one-joins", "scale"])
def test_cheap_bound_is_exact_on_the_named_scenarios(
    kind: str, per_location: int, hierarchical: bool
) -> None:
    for t, p in [(1000, 20), (997, 30), (2000, 100)]:
        scenario = sc.build(kind, t, p, per_location=per_location, hierarchical=hierarchical)
        assert isinstance(scenario, sc.Scenario)
        exact = oracles.best_locality_exact(scenario.tasks, scenario.metadata)
        assert oracles.best_locality(scenario.tasks, scenario.metadata) == exact  # closed form
        assert oracles.locality_upper_bound(scenario.tasks, scenario.metadata) == exact


def test_the_oracle_stays_equal_the_lower_bound_on_random_instances() -> None:
    from groupers.testing.oracles import _optimum

    rng = random.Random(7)
    for _ in range(60):
        items = tasks(rng.randint(0, 60))
        live = {
            f"p{i}": f"z{rng.randint(0, 1)}/h{rng.randint(0, 4)}" for i in range(rng.randint(1, 8))
        }
        old = [*live, "x", "y"]
        md = GrouperMetadata(
            live,
            {
                t.name: f"z{rng.randint(0, 1)}/h{rng.randint(0, 5)}"
                for t in items
                if rng.random() < 0.9
            },
            {t.name: rng.choice(old) for t in items if rng.random() < 0.9},
        )
        optimum = _optimum(items, md)
        assert optimum.stays == len(items) - oracles.movement_lower_bound(items, md)
        assert optimum.local <= oracles.locality_upper_bound(items, md)


def test_host_affinity_on_a_hierarchical_scenario() -> None:
    grouper = get_grouper("host-affinity")
    for kind in sc.SCENARIO_KINDS:
        item = sc.build(kind, 600, 24, per_location=3, hierarchical=True, sample=4)
        if isinstance(item, sc.RollingRestart):
            m = sc.run_rolling_restart(grouper, item).total
        else:
            m = sc.run_scenario(grouper, item)
        assert m.moved == m.lower_bound, kind
        assert m.locality_kept == m.locality_best, kind
        assert m.max_minus_min <= 1, kind


# ----------------------------------------------------------------------------- measures, matching


def test_measures_count_moves_local_tasks_and_weights() -> None:
    previous = {"a": "p1", "b": "p1", "c": "p2"}
    current = {"a": "p1", "b": "p2", "c": "p2", "d": "p1"}
    assert measures.tasks_moved(previous, current) == 2  # b moved, d is new
    assert measures.moved_tasks(previous, current) == ["b", "d"]
    assert measures.moved_tasks(previous, current, count_new=False) == ["b"]
    assert measures.tasks_moved(previous, current, tasks=["a", "b", "e"]) == 2  # e unassigned
    assert measures.tasks_moved(previous, current, weights={"b": 5, "d": 7}) == 12
    where = {"p1": "host-1", "p2": "host-2"}
    recorded = {"a": "host-1", "b": "host-1", "c": "host-3"}
    assert measures.tasks_kept_local(current, where, recorded) == 1  # only a
    assert measures.tasks_with_locality(current, recorded) == 3
    assert measures.owners(containers(current, where, tasks(0) + _named("abcd"))) == current


def _named(letters: str) -> list[TaskModel]:
    return [TaskModel(letter, frozenset()) for letter in letters]


def test_lower_bound_accepts_names_or_task_models() -> None:
    scenario = sc.one_leaves(100, 7)
    names = [t.name for t in scenario.tasks]
    bound = measures.movement_lower_bound(scenario.tasks, scenario.metadata)
    assert measures.movement_lower_bound(names, scenario.metadata) == bound
    assert oracles.movement_lower_bound is measures.movement_lower_bound


def test_bipartite_max_flow_reaches_the_maximum_and_respects_capacities() -> None:
    nx = pytest.importorskip("networkx")
    rng = random.Random(11)
    for _ in range(200):
        lefts = [f"p{i}" for i in range(rng.randint(1, 6))]
        rights = [f"h{j}" for j in range(rng.randint(1, 6))]
        supply = {left: rng.randint(0, 5) for left in lefts}
        room = {right: rng.randint(1, 4) for right in rights}
        edges = {
            left: {right: rng.randint(1, 3) for right in rights if rng.random() < 0.5}
            for left in lefts
        }
        edges = {left: mine for left, mine in edges.items() if mine}
        flow = max_flow_bipartite(supply, room, edges)
        for (left, right), units in flow.items():
            assert 0 <= units <= edges[left][right]
        for left in edges:
            assert sum(u for (l2, _), u in flow.items() if l2 == left) <= supply[left]
        for right in rights:
            assert sum(u for (_, r2), u in flow.items() if r2 == right) <= room[right]
        graph = nx.DiGraph()
        for left, mine in edges.items():
            graph.add_edge("s", ("l", left), capacity=supply[left])
            for right, cap in mine.items():
                graph.add_edge(("l", left), ("r", right), capacity=cap)
        for right in rights:
            graph.add_edge(("r", right), "t", capacity=room[right])
        best = nx.maximum_flow_value(graph, "s", "t") if edges else 0
        assert sum(flow.values()) == best


def test_bipartite_max_flow_serves_left_nodes_in_the_order_given() -> None:
    """With ``order`` the first left nodes take their first right nodes, and the flow is still
    maximum: ``c`` has only ``x``, so ``a`` (served first, on ``x``) moves over to ``y``."""
    edges = {"c": {"x": 1}, "a": {"x": 1, "y": 1}, "b": {"x": 1, "z": 1}}
    room = {"x": 1, "y": 1, "z": 1}
    supply = dict.fromkeys(edges, 1)
    flow = max_flow_bipartite(supply, room, edges, order=["b", "a"])
    assert {pair for pair, units in flow.items() if units} == {("b", "x"), ("a", "y")}
    flow = max_flow_bipartite(supply, room, edges, order=["a", "b", "c"])
    assert {pair for pair, units in flow.items() if units} == {("a", "y"), ("b", "z"), ("c", "x")}
    flow = max_flow_bipartite(supply, room, edges)  # sorted: a, b, c
    assert {pair for pair, units in flow.items() if units} == {("a", "y"), ("b", "z"), ("c", "x")}


def test_general_max_flow_reaches_the_maximum_and_conserves_flow() -> None:
    nx = pytest.importorskip("networkx")
    rng = random.Random(5)
    for _ in range(300):
        n = rng.randint(2, 9)
        capacity: dict[tuple[int, int], int] = {}
        for _ in range(rng.randint(0, 25)):
            tail, head = rng.randrange(n), rng.randrange(n)
            if tail != head:
                capacity[(tail, head)] = rng.randint(0, 4)
        arcs = [(tail, head, cap) for (tail, head), cap in capacity.items()]
        flow = max_flow(arcs, 0, n - 1)
        assert all(0 <= flow[(t, h)] <= c for t, h, c in arcs)
        for node in range(1, n - 1):
            into = sum(flow[(t, h)] for t, h, _ in arcs if h == node)
            assert into == sum(flow[(t, h)] for t, h, _ in arcs if t == node)
        out = sum(flow[(t, h)] for t, h, _ in arcs if t == 0)
        back = sum(flow[(t, h)] for t, h, _ in arcs if h == 0)
        graph = nx.DiGraph()
        graph.add_nodes_from(range(n))
        graph.add_edges_from((t, h, {"capacity": c}) for t, h, c in arcs)
        assert out - back == nx.maximum_flow_value(graph, 0, n - 1)
