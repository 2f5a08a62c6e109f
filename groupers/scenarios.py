"""Named rebalance scenarios, their lower bounds, and the metrics tests and benchmarks share.

A *steady state* is a balanced assignment of ``T`` tasks (``Partition i``, one stream partition
``kafka/events/i`` each) to ``P`` processors (``p-0000`` ...): task ``i`` runs on processor
``i mod P``, and every task's locality is its processor's location. Processor ``j`` lives at host
``j // per_location``; the host's location id is ``host-0007`` (flat) or
``zone-b/rack-02/host-0007`` (hierarchical; zones and racks interleave so that even small
instances span several of them).

The scenarios change the live processors of a steady state and ask for one rebalance:

- :func:`one_leaves`: one processor vanishes;
- :func:`one_joins`: a processor joins, at a new location (``per_location=1``) or at an existing
  one (``per_location > 1``);
- :func:`scale`: ``P -> P * 13 / 10`` (new processors at new hosts, ``per_location`` per host);
- :func:`rolling_restart`: every processor (or a sample) is replaced in turn by a new id at the
  same location, one rebalance per replacement; :func:`run_rolling_restart` drives a grouper
  through the sequence, feeding each step the previous step's answer.

The yardsticks, computed independently of any grouper:

- :func:`movement_lower_bound`: the fewest tasks any balanced answer must move;
- :func:`best_locality`: the most tasks a balanced, movement-minimal answer can keep at their
  recorded location: exact, in closed form when every surviving task is recorded where its
  processor is (all scenarios here) and by a min-cost flow otherwise; or the cheap
  movement-blind :func:`locality_upper_bound`;
- :func:`measure`: what an answer actually did (:class:`Metrics`).

Pure: no I/O; imports only the data model and the grouper contract (``networkx`` is imported
lazily by the exact locality oracle, which only tests and benchmarks call).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import overload

from groupers.api import GrouperMetadata, TaskNameGrouper
from metadata.model import ContainerModel, FrozenMap, SystemStreamPartition, TaskModel

__all__ = [
    "EXACT_LIMIT",
    "SCENARIO_KINDS",
    "Metrics",
    "RollingRestart",
    "RollingResult",
    "Scenario",
    "SteadyState",
    "best_locality",
    "best_locality_and_method",
    "best_locality_exact",
    "build",
    "combine",
    "locality_upper_bound",
    "location_id",
    "make_tasks",
    "measure",
    "movement_lower_bound",
    "one_joins",
    "one_leaves",
    "processor_id",
    "rebased",
    "rolling_restart",
    "run_rolling_restart",
    "run_scenario",
    "scale",
    "steady_state",
]

SCENARIO_KINDS = ("one-leaves", "one-joins", "scale", "rolling-restart")

#: With ``exact=None``, :func:`best_locality` solves an instance that has no closed form by the
#: min-cost flow only up to this many task classes (see :func:`best_locality_exact`), and returns
#: the cheap bound beyond.
EXACT_LIMIT = 3000


# ----------------------------------------------------------------------------- building blocks


def make_tasks(count: int) -> list[TaskModel]:
    """``Partition 0`` .. ``Partition count-1``, each holding ``kafka/events/i``."""
    return [
        TaskModel(f"Partition {i}", frozenset({SystemStreamPartition("kafka", "events", i)}), i)
        for i in range(count)
    ]


def _width(largest_index: int) -> int:
    return max(4, len(str(max(0, largest_index))))


def processor_id(index: int, width: int = 4) -> str:
    """``p-0007`` (zero-padded to ``width`` digits so ids sort like their numbers)."""
    return f"p-{index:0{width}d}"


def location_id(host: int, *, hierarchical: bool = False, width: int = 4) -> str:
    """``host-0007``, or ``zone-b/rack-02/host-0007`` when ``hierarchical``.

    Hierarchical hosts interleave over three zones and, within a zone, four racks, so host ``h``
    is in zone ``"abc"[h % 3]`` and rack ``(h // 3) % 4``.
    """
    host_part = f"host-{host:0{width}d}"
    if not hierarchical:
        return host_part
    return f"zone-{'abc'[host % 3]}/rack-{(host // 3) % 4:02d}/{host_part}"


@dataclass(frozen=True)
class SteadyState:
    """A balanced assignment in force, and the locality it recorded."""

    tasks: list[TaskModel]
    processor_locality: Mapping[str, str]
    assignment: Mapping[str, str]  # task name -> processor id
    task_locality: Mapping[str, str]  # task name -> its processor's location


def steady_state(
    tasks: int,
    processors: int,
    *,
    per_location: int = 1,
    hierarchical: bool = False,
    width: int = 4,
) -> SteadyState:
    """Task ``i`` on processor ``i mod P``; processor ``j`` at host ``j // per_location``."""
    if processors < 1:
        raise ValueError(f"processors must be >= 1, got {processors}")
    if per_location < 1:
        raise ValueError(f"per_location must be >= 1, got {per_location}")
    pids = [processor_id(j, width) for j in range(processors)]
    where = [
        location_id(j // per_location, hierarchical=hierarchical, width=width)
        for j in range(processors)
    ]
    items = make_tasks(tasks)
    assignment: dict[str, str] = {}
    task_locality: dict[str, str] = {}
    for i, item in enumerate(items):
        assignment[item.name] = pids[i % processors]
        task_locality[item.name] = where[i % processors]
    return SteadyState(
        items,
        FrozenMap(zip(pids, where, strict=True)),
        FrozenMap(assignment),
        FrozenMap(task_locality),
    )


@dataclass(frozen=True)
class Scenario:
    """One rebalance: ``before`` is the steady state, ``metadata`` what the grouper is given.

    ``before.processor_locality`` are the processors of the steady state and
    ``before.previous_task_to_processor`` its assignment; ``metadata`` has the new live
    processors and the same task locality and previous assignment.
    """

    name: str
    tasks: list[TaskModel]
    before: GrouperMetadata
    metadata: GrouperMetadata


def _label(kind: str, tasks: int, processors: int, per_location: int, hierarchical: bool) -> str:
    shape = "zone/rack/host" if hierarchical else "host"
    return f"{kind} T={tasks} P={processors} {per_location}/{shape}"


def _scenario(
    kind: str,
    state: SteadyState,
    live: Mapping[str, str],
    per_location: int,
    hierarchical: bool,
) -> Scenario:
    before = GrouperMetadata(state.processor_locality, state.task_locality, state.assignment)
    after = GrouperMetadata(FrozenMap(live), state.task_locality, state.assignment)
    name = _label(kind, len(state.tasks), len(state.processor_locality), per_location, hierarchical)
    return Scenario(name, state.tasks, before, after)


def one_leaves(
    tasks: int, processors: int, *, per_location: int = 1, hierarchical: bool = False
) -> Scenario:
    """Processor ``P // 2`` vanishes (its location keeps ``per_location - 1`` others)."""
    if processors < 2:
        raise ValueError("one_leaves needs at least 2 processors")
    width = _width(processors)
    state = steady_state(
        tasks, processors, per_location=per_location, hierarchical=hierarchical, width=width
    )
    gone = processor_id(processors // 2, width)
    live = {pid: loc for pid, loc in state.processor_locality.items() if pid != gone}
    return _scenario("one-leaves", state, live, per_location, hierarchical)


def one_joins(
    tasks: int, processors: int, *, per_location: int = 1, hierarchical: bool = False
) -> Scenario:
    """Processor ``P`` joins: at a new host when ``per_location == 1``, else on host 0."""
    width = _width(processors)
    state = steady_state(
        tasks, processors, per_location=per_location, hierarchical=hierarchical, width=width
    )
    host = processors if per_location == 1 else 0
    live = dict(state.processor_locality)
    live[processor_id(processors, width)] = location_id(
        host, hierarchical=hierarchical, width=width
    )
    return _scenario("one-joins", state, live, per_location, hierarchical)


def scale(
    tasks: int,
    processors: int,
    *,
    per_location: int = 1,
    hierarchical: bool = False,
    factor: tuple[int, int] = (13, 10),
) -> Scenario:
    """``P -> P * 13 // 10``: the new processors ``P ..`` continue the host numbering
    (``j // per_location``), so with ``P`` a multiple of ``per_location`` they are on new hosts.
    """
    grown = processors * factor[0] // factor[1]
    width = _width(max(processors, grown))
    state = steady_state(
        tasks, processors, per_location=per_location, hierarchical=hierarchical, width=width
    )
    live = dict(state.processor_locality)
    for j in range(processors, grown):
        live[processor_id(j, width)] = location_id(
            j // per_location, hierarchical=hierarchical, width=width
        )
    kind = f"scale {factor[1]}->{factor[0]}"
    return _scenario(kind, state, live, per_location, hierarchical)


@dataclass(frozen=True)
class RollingRestart:
    """A steady state and the replacements ``(old id, new id)``, one rebalance each."""

    name: str
    tasks: list[TaskModel]
    before: GrouperMetadata
    replacements: list[tuple[str, str]]


def rolling_restart(
    tasks: int,
    processors: int,
    *,
    per_location: int = 1,
    hierarchical: bool = False,
    sample: int | None = None,
) -> RollingRestart:
    """Processors ``p-0000``, ``p-0001``, ... (all, or the first ``sample``) are replaced in
    turn by new ids ``p-<P>``, ``p-<P+1>``, ... at the same location.
    """
    count = processors if sample is None else min(sample, processors)
    width = _width(processors + count)
    state = steady_state(
        tasks, processors, per_location=per_location, hierarchical=hierarchical, width=width
    )
    replacements = [
        (processor_id(j, width), processor_id(processors + j, width)) for j in range(count)
    ]
    before = GrouperMetadata(state.processor_locality, state.task_locality, state.assignment)
    name = _label("rolling-restart", tasks, processors, per_location, hierarchical)
    if count < processors:
        name += f" ({count} of {processors} restarted)"
    return RollingRestart(name, state.tasks, before, replacements)


def build(
    kind: str,
    tasks: int,
    processors: int,
    *,
    per_location: int = 1,
    hierarchical: bool = False,
    sample: int | None = None,
) -> Scenario | RollingRestart:
    """The scenario called ``kind`` (one of :data:`SCENARIO_KINDS`)."""
    if kind == "one-leaves":
        return one_leaves(tasks, processors, per_location=per_location, hierarchical=hierarchical)
    if kind == "one-joins":
        return one_joins(tasks, processors, per_location=per_location, hierarchical=hierarchical)
    if kind == "scale":
        return scale(tasks, processors, per_location=per_location, hierarchical=hierarchical)
    if kind == "rolling-restart":
        return rolling_restart(
            tasks, processors, per_location=per_location, hierarchical=hierarchical, sample=sample
        )
    raise ValueError(f"unknown scenario {kind!r}; known: {', '.join(SCENARIO_KINDS)}")


@overload
def rebased(scenario: Scenario, containers: Iterable[ContainerModel]) -> Scenario: ...
@overload
def rebased(scenario: RollingRestart, containers: Iterable[ContainerModel]) -> RollingRestart: ...
def rebased(
    scenario: Scenario | RollingRestart, containers: Iterable[ContainerModel]
) -> Scenario | RollingRestart:
    """The same change, starting from another layout of the same processors.

    ``containers`` is an answer on the processors of ``scenario.before`` (typically a stateless
    peer's own steady state: what it assigns with no history). The previous assignment becomes
    that answer and every task's locality becomes its processor's location there.
    """
    live = scenario.before.processor_locality
    owner: dict[str, str] = {}
    located: dict[str, str] = {}
    for container in containers:
        where = live[container.processor_id]
        for name in container.tasks:
            owner[name] = container.processor_id
            located[name] = where
    before = GrouperMetadata(live, FrozenMap(located), FrozenMap(owner))
    if isinstance(scenario, Scenario):
        after = GrouperMetadata(
            scenario.metadata.processor_locality,
            before.task_locality,
            before.previous_task_to_processor,
        )
        return replace(scenario, before=before, metadata=after)
    return replace(scenario, before=before)


# ----------------------------------------------------------------------------- the yardsticks


def _names(tasks: Iterable[TaskModel]) -> list[str]:
    return sorted({task.name for task in tasks})


def _balance(total: int, processors: int) -> tuple[int, int]:
    """``(floor(T/P), T mod P)``: every processor gets floor or floor+1, exactly r of them +1."""
    if processors < 1:
        raise ValueError("no live processor: nothing can be assigned")
    return divmod(total, processors)


def _kept_counts(names: Iterable[str], metadata: GrouperMetadata) -> tuple[Counter[str], int]:
    """Tasks per live processor that were on it before, and the orphans (no live previous)."""
    live = metadata.processor_locality
    previous = metadata.previous_task_to_processor
    kept: Counter[str] = Counter()
    orphans = 0
    for name in names:
        owner = previous.get(name)
        if owner is not None and owner in live:
            kept[owner] += 1
        else:
            orphans += 1
    return kept, orphans


def movement_lower_bound(tasks: Collection[TaskModel], metadata: GrouperMetadata) -> int:
    """The fewest tasks a balanced answer (each processor floor or ceil of T/P) must move.

    Orphans (no previous processor, or one that is not live) must move. A survivor holding ``c``
    of its previous tasks keeps at most ``min(c, target)``; the ``T mod P`` ceil targets are best
    given to the survivors holding the most (an exchange argument: swapping a ceil target towards
    a fuller survivor never lowers the sum of ``min(c, target)``). So the bound is
    ``orphans + sum(max(0, c - target))`` and it is attained: new processors and survivors below
    target can absorb everything that moves.

    Raises ValueError when there is no live processor.
    """
    names = _names(tasks)
    floor, extra = _balance(len(names), len(metadata.processor_locality))
    kept, orphans = _kept_counts(names, metadata)
    shed = 0
    for rank, count in enumerate(sorted(kept.values(), reverse=True)):
        target = floor + 1 if rank < extra else floor
        shed += max(0, count - target)
    return orphans + shed


def locality_upper_bound(tasks: Collection[TaskModel], metadata: GrouperMetadata) -> int:
    """A cheap upper bound on :func:`best_locality`, in O(T + P); it ignores movement.

    Balance alone: location ``L`` with ``n_L`` processors holds ``n_L * floor + e_L`` tasks,
    where the extra (ceil) places ``e_L <= n_L`` sum to ``T mod P``. With ``t_L`` the tasks
    recorded at ``L``, the most that can be local is ``sum_L min(t_L, n_L * floor)`` plus
    ``min(T mod P, sum_L min(n_L, max(0, t_L - n_L * floor)))`` (each extra place gains one task
    or none, so any greedy order is optimal). That is exact when movement is free; requiring
    minimal movement can only lower it, e.g. two processors holding each other's tasks (a swap:
    bound 4, optimum 0) or a ceil place that minimal movement must give to the fullest survivor
    where locality would want it elsewhere (see the tests). :func:`best_locality` is exact.
    """
    names = _names(tasks)
    live = metadata.processor_locality
    floor, extra = _balance(len(names), len(live))
    per_location: Counter[str] = Counter(live.values())
    wanting = _wanting(names, metadata, per_location)
    lows = dict.fromkeys(per_location, 0)
    return _greedy_locality(wanting, per_location, floor, lows, dict(per_location), extra)


def _wanting(
    names: Iterable[str], metadata: GrouperMetadata, per_location: Mapping[str, int]
) -> Counter[str]:
    """Tasks per live location recorded there (``t_L``)."""
    wanting: Counter[str] = Counter()
    task_locality = metadata.task_locality
    for name in names:
        where = task_locality.get(name)
        if where is not None and where in per_location:
            wanting[where] += 1
    return wanting


def _greedy_locality(
    wanting: Mapping[str, int],
    per_location: Mapping[str, int],
    floor: int,
    low: Mapping[str, int],
    high: Mapping[str, int],
    extra: int,
) -> int:
    """``max sum_L min(t_L, n_L * floor + e_L)`` over ``low_L <= e_L <= high_L``, ``sum e = extra``.

    Each unit of ``e_L`` gains one task while ``n_L * floor + e_L < t_L`` and nothing after, so:
    take the lows, then spend the rest where it still gains (callers ensure ``sum low <= extra
    <= sum high``).
    """
    base = 0
    spill = 0
    for where, count in per_location.items():
        want = wanting.get(where, 0)
        room = count * floor + low[where]
        base += min(want, room)
        spill += min(high[where] - low[where], max(0, want - room))
    rest = extra - sum(low.values())
    return base + min(rest, spill)


def _best_locality_consistent(
    tasks: Collection[TaskModel], metadata: GrouperMetadata
) -> int | None:
    """Exact best locality in O(T + P) for *consistent* instances, else None.

    Consistent: every task whose previous processor is live is recorded at that processor's
    location (true of every steady state, and after every step of a rolling restart, since
    processors write locality where they run). Then, for any targets ``t_p`` (floor or ceil),
    a movement-minimal answer keeps ``min(c_p, t_p)`` tasks on each survivor, all local, and
    can make ``min(m_L, h_L)`` of the movers local at each location (``m_L`` movers recorded at
    ``L``, ``h_L`` free places there). As ``kept_L + h_L = capacity_L`` and
    ``kept_L + m_L = t_L``, the locality is ``sum_L min(t_L, capacity_L)``: the movement-blind
    formula of :func:`locality_upper_bound`, but with the ceil places restricted to those that
    keep movement minimal. With ``A`` the survivors holding more than ``floor`` of their tasks:
    if ``|A| >= T mod P`` the ceil places must all go to ``A`` (any of them); otherwise all of
    ``A`` get one and the rest go anywhere. Both are box constraints per location, and the
    greedy of :func:`_greedy_locality` is optimal for them.
    """
    names = _names(tasks)
    live = metadata.processor_locality
    floor, extra = _balance(len(names), len(live))
    kept, _ = _kept_counts(names, metadata)
    previous = metadata.previous_task_to_processor
    task_locality = metadata.task_locality
    for name in names:
        owner = previous.get(name)
        if owner is not None and owner in live and task_locality.get(name) != live[owner]:
            return None
    per_location: Counter[str] = Counter(live.values())
    above: Counter[str] = Counter(live[pid] for pid, count in kept.items() if count > floor)
    wanting = _wanting(names, metadata, per_location)
    if sum(above.values()) >= extra:
        low = dict.fromkeys(per_location, 0)
        high = {where: above.get(where, 0) for where in per_location}
    else:
        low = {where: above.get(where, 0) for where in per_location}
        high = dict(per_location)
    return _greedy_locality(wanting, per_location, floor, low, high, extra)


@dataclass(frozen=True)
class _Optimum:
    stays: int
    local: int


def _optimum(tasks: Collection[TaskModel], metadata: GrouperMetadata) -> _Optimum:
    """Max stays, then max exact-location tasks, over balanced answers: a min-cost flow.

    Tasks are compressed into classes ``(live previous processor or None, recorded location)``:
    two tasks of one class are interchangeable for every constraint and objective. Network::

        source -> class            capacity = class size
        class  -> its previous     weight -(W + local?)       (staying; W = T + 1 > any locality)
        class  -> @its location    weight -1                  (moving, to its location)
        class  -> @anywhere        weight 0                   (moving, anywhere)
        @L -> processor at L, @anywhere -> every processor    weight 0
        processor -> sink          capacity floor(T/P)
        processor -> extra -> sink capacity 1 each, T mod P in all

    All T units must flow and the sink side has exactly T capacity, so every answer is balanced.
    A class routed through ``@...`` to its own previous processor is priced as a move: never
    optimal, since the direct edge is cheaper and never saturated. Edges are linear in classes
    and processors, so even T=100,000, P=1,000 solves in seconds.
    """
    import networkx as nx

    names = _names(tasks)
    live = metadata.processor_locality
    floor, extra = _balance(len(names), len(live))
    total = len(names)
    if total == 0:
        return _Optimum(0, 0)
    previous = metadata.previous_task_to_processor
    task_locality = metadata.task_locality
    classes: Counter[tuple[str | None, str | None]] = Counter()
    for name in names:
        owner = previous.get(name)
        classes[(owner if owner in live else None, task_locality.get(name))] += 1
    weight = total + 1
    locations = set(live.values())

    graph = nx.DiGraph()
    graph.add_node("source", demand=-total)
    graph.add_node("sink", demand=total)
    for pid, place in live.items():
        graph.add_edge(("@", place), ("p", pid), weight=0)
        graph.add_edge("anywhere", ("p", pid), weight=0)
        if floor:
            graph.add_edge(("p", pid), "sink", capacity=floor, weight=0)
        if extra:
            graph.add_edge(("p", pid), "extra", capacity=1, weight=0)
    if extra:
        graph.add_edge("extra", "sink", capacity=extra, weight=0)
    for index, ((owner, where), size) in enumerate(sorted(classes.items(), key=_class_key)):
        node = ("c", index)
        graph.add_edge("source", node, capacity=size, weight=0)
        graph.add_edge(node, "anywhere", capacity=size, weight=0)
        if where is not None and where in locations:
            graph.add_edge(node, ("@", where), capacity=size, weight=-1)
        if owner is not None:
            bonus = 1 if where is not None and live[owner] == where else 0
            graph.add_edge(node, ("p", owner), capacity=size, weight=-(weight + bonus))
    cost, flow = nx.network_simplex(graph)
    stays = 0
    for index, ((owner, _), _size) in enumerate(sorted(classes.items(), key=_class_key)):
        if owner is not None:
            stays += flow[("c", index)].get(("p", owner), 0)
    # cost = -(W * stays + local)
    local = -int(cost) - weight * stays
    return _Optimum(stays, local)


def _class_key(item: tuple[tuple[str | None, str | None], int]) -> tuple[str, str]:
    (owner, where), _ = item
    return (owner or "", where or "")


def best_locality_exact(tasks: Collection[TaskModel], metadata: GrouperMetadata) -> int:
    """The most tasks a balanced, movement-minimal answer can keep at their recorded location.

    Exact: a min-cost flow (networkx) with priorities balance, then fewest moves, then locality
    (see :func:`_optimum`). Its number of stays also equals ``T - movement_lower_bound``, which
    the tests check to cross-validate both.
    """
    return _optimum(tasks, metadata).local


def best_locality(
    tasks: Collection[TaskModel], metadata: GrouperMetadata, *, exact: bool | None = None
) -> int:
    """The most tasks a balanced, movement-minimal answer can keep at their recorded location.

    See :func:`best_locality_and_method`; ``exact=False`` returns the cheap
    :func:`locality_upper_bound`, ``exact=True`` always an exact figure.
    """
    return best_locality_and_method(tasks, metadata, exact=exact)[0]


def best_locality_and_method(
    tasks: Collection[TaskModel], metadata: GrouperMetadata, *, exact: bool | None = None
) -> tuple[int, str]:
    """Best locality and how it was found: ``"closed form"``, ``"flow"`` or ``"upper bound"``.

    Exact instances are solved in O(T + P) when consistent (:func:`_best_locality_consistent`),
    else by the min-cost flow (:func:`best_locality_exact`). With ``exact=None`` an inconsistent
    instance with more than :data:`EXACT_LIMIT` task classes gets the cheap bound instead.
    """
    if exact is False:
        return locality_upper_bound(tasks, metadata), "upper bound"
    closed = _best_locality_consistent(tasks, metadata)
    if closed is not None:
        return closed, "closed form"
    if exact is None and _class_count(tasks, metadata) > EXACT_LIMIT:
        return locality_upper_bound(tasks, metadata), "upper bound"
    return best_locality_exact(tasks, metadata), "flow"


def _class_count(tasks: Collection[TaskModel], metadata: GrouperMetadata) -> int:
    live = metadata.processor_locality
    previous = metadata.previous_task_to_processor
    task_locality = metadata.task_locality
    seen: set[tuple[str | None, str | None]] = set()
    for task in tasks:
        owner = previous.get(task.name)
        seen.add((owner if owner in live else None, task_locality.get(task.name)))
    return len(seen)


# ----------------------------------------------------------------------------- measuring


@dataclass(frozen=True)
class Metrics:
    """What one answer (or a sum of steps) did, against the yardsticks.

    - ``moved``: tasks whose processor differs from the previous one (new tasks count);
    - ``lower_bound``: :func:`movement_lower_bound`;
    - ``locality_kept``: tasks on a processor whose location equals their recorded one;
    - ``locality_best``: :func:`best_locality` (``locality_exact`` says whether exact);
    - ``max_minus_min``: task count of the fullest minus the emptiest live processor (for a sum
      of steps: the worst step).
    """

    tasks: int
    processors: int
    moved: int
    lower_bound: int
    locality_kept: int
    locality_best: int
    locality_exact: bool
    max_minus_min: int
    steps: int = 1

    @property
    def extra_moves(self) -> int:
        return self.moved - self.lower_bound

    @property
    def locality_lost(self) -> int:
        return self.locality_best - self.locality_kept


def measure(
    tasks: Collection[TaskModel],
    metadata: GrouperMetadata,
    containers: Iterable[ContainerModel],
    *,
    exact: bool | None = None,
) -> Metrics:
    """Count what ``containers`` did for the rebalance ``(tasks, metadata)``.

    Tasks the answer leaves unassigned count as moved and not local; processors without a
    container count as empty.
    """
    live = metadata.processor_locality
    owner: dict[str, str] = {}
    sizes: dict[str, int] = dict.fromkeys(live, 0)
    for container in containers:
        sizes[container.processor_id] = len(container.tasks)
        for name in container.tasks:
            owner[name] = container.processor_id
    previous = metadata.previous_task_to_processor
    task_locality = metadata.task_locality
    names = _names(tasks)
    moved = 0
    local = 0
    for name in names:
        pid = owner.get(name)
        if pid is None or previous.get(name) != pid:
            moved += 1
        recorded = task_locality.get(name)
        if pid is not None and recorded is not None and live.get(pid) == recorded:
            local += 1
    best, method = best_locality_and_method(tasks, metadata, exact=exact)
    counts = list(sizes.values())
    return Metrics(
        tasks=len(names),
        processors=len(live),
        moved=moved,
        lower_bound=movement_lower_bound(tasks, metadata),
        locality_kept=local,
        locality_best=best,
        locality_exact=method != "upper bound",
        max_minus_min=(max(counts) - min(counts)) if counts else 0,
    )


def combine(steps: Sequence[Metrics]) -> Metrics:
    """Sum of a sequence of steps (``max_minus_min``: the worst step)."""
    if not steps:
        raise ValueError("nothing to combine")
    return Metrics(
        tasks=steps[0].tasks,
        processors=steps[0].processors,
        moved=sum(m.moved for m in steps),
        lower_bound=sum(m.lower_bound for m in steps),
        locality_kept=sum(m.locality_kept for m in steps),
        locality_best=sum(m.locality_best for m in steps),
        locality_exact=all(m.locality_exact for m in steps),
        max_minus_min=max(m.max_minus_min for m in steps),
        steps=sum(m.steps for m in steps),
    )


def run_scenario(
    grouper: TaskNameGrouper, scenario: Scenario, *, exact: bool | None = None
) -> Metrics:
    """Run ``grouper`` on one scenario and measure the answer."""
    containers = grouper.group(scenario.tasks, scenario.metadata)
    return measure(scenario.tasks, scenario.metadata, containers, exact=exact)


@dataclass(frozen=True)
class RollingResult:
    """Per-step metrics and wall times of a rolling restart, and their sum."""

    total: Metrics
    steps: list[Metrics]
    seconds: list[float] = field(default_factory=list)
    final: Mapping[str, str] = field(default_factory=lambda: FrozenMap())


def run_rolling_restart(
    grouper: TaskNameGrouper,
    restart: RollingRestart,
    *,
    exact: bool | None = None,
    check: bool = True,
) -> RollingResult:
    """Drive ``grouper`` through the replacements, one rebalance each.

    Step ``k`` replaces ``old_k`` by ``new_k`` at ``old_k``'s location; its previous assignment
    is step ``k - 1``'s answer, and its task locality is where step ``k - 1`` put each task (the
    processors write locality after the barrier; invariant I4). With ``check`` every answer is
    validated (:func:`groupers.api.validate`); validation is not part of the timed call.
    """
    from groupers.api import validate

    live = dict(restart.before.processor_locality)
    previous: Mapping[str, str] = restart.before.previous_task_to_processor
    task_locality: Mapping[str, str] = restart.before.task_locality
    steps: list[Metrics] = []
    seconds: list[float] = []
    for old, new in restart.replacements:
        where = live.pop(old)
        live[new] = where
        metadata = GrouperMetadata(FrozenMap(live), task_locality, previous)
        start = time.perf_counter()
        containers = grouper.group(restart.tasks, metadata)
        seconds.append(time.perf_counter() - start)
        if check:
            validate(restart.tasks, metadata, containers)
        steps.append(measure(restart.tasks, metadata, containers, exact=exact))
        owner: dict[str, str] = {}
        located: dict[str, str] = {}
        for container in containers:
            here = live[container.processor_id]
            for name in container.tasks:
                owner[name] = container.processor_id
                located[name] = here
        previous = FrozenMap(owner)
        task_locality = FrozenMap({**task_locality, **located})
    return RollingResult(combine(steps), steps, seconds, previous)
