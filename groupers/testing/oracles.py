"""Oracles: the best a balanced answer can do, computed independently of any grouper.

- :func:`groupers.measures.movement_lower_bound` (re-exported): the fewest tasks any balanced
  answer must move;
- :func:`best_locality`: the most tasks a balanced, movement-minimal answer can keep at their
  recorded location: exact, in closed form when every surviving task is recorded where its
  processor is (all the named scenarios) and by a min-cost flow otherwise
  (:func:`groupers.matching.min_cost_flow`, networkx); or the cheap movement-blind
  :func:`locality_upper_bound`;
- :func:`measure`: what an answer actually did against those yardsticks (:class:`Metrics`),
  counted by :mod:`groupers.measures`;
- :func:`stream_skew`: how evenly an answer spreads each stream (0 or 1 is as even as balance
  allows when processors are equal and take whole shares).

Pure: no I/O. networkx is imported only when the exact min-cost flow runs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from groupers.api import GrouperMetadata
from groupers.matching import Arc, min_cost_flow
from groupers.measures import (
    balance,
    movement_lower_bound,
    owners,
    survivor_counts,
    task_names,
    tasks_kept_local,
    tasks_moved,
)
from groupers.spread import stream_of
from metadata.model import ContainerModel, TaskModel

__all__ = [
    "EXACT_LIMIT",
    "Metrics",
    "best_locality",
    "best_locality_and_method",
    "best_locality_exact",
    "combine",
    "locality_upper_bound",
    "measure",
    "movement_lower_bound",
    "stream_skew",
]

#: With ``exact=None``, :func:`best_locality` solves an instance that has no closed form by the
#: min-cost flow only up to this many task classes (see :func:`best_locality_exact`), and returns
#: the cheap bound beyond.
EXACT_LIMIT = 3000


# ----------------------------------------------------------------------------- the yardsticks


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
    names = task_names(tasks)
    live = metadata.processor_locality
    floor, extra = balance(len(names), len(live))
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
    names = task_names(tasks)
    live = metadata.processor_locality
    floor, extra = balance(len(names), len(live))
    kept, _ = survivor_counts(names, metadata)
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
    and processors, so even T=100,000, P=1,000 solves in seconds
    (:func:`groupers.matching.min_cost_flow`).
    """
    names = task_names(tasks)
    live = metadata.processor_locality
    total = len(names)
    if total == 0:
        balance(total, len(live))
        return _Optimum(0, 0)
    classes = _classes(names, metadata)
    weight = total + 1
    cost, flow = min_cost_flow(
        _network(classes, metadata, weight), {"source": -total, "sink": total}
    )
    stays = 0
    for index, ((owner, _), _size) in enumerate(classes):
        if owner is not None:
            stays += flow[("c", index)].get(("p", owner), 0)
    # cost = -(W * stays + local)
    local = -cost - weight * stays
    return _Optimum(stays, local)


_Class = tuple[tuple[str | None, str | None], int]  # ((live previous or None, location), size)


def _classes(names: Iterable[str], metadata: GrouperMetadata) -> list[_Class]:
    live = metadata.processor_locality
    previous = metadata.previous_task_to_processor
    task_locality = metadata.task_locality
    classes: Counter[tuple[str | None, str | None]] = Counter()
    for name in names:
        owner = previous.get(name)
        classes[(owner if owner in live else None, task_locality.get(name))] += 1
    return sorted(classes.items(), key=_class_key)


def _network(classes: list[_Class], metadata: GrouperMetadata, weight: int) -> list[Arc]:
    """The arcs of :func:`_optimum`'s network."""
    live = metadata.processor_locality
    floor, extra = balance(sum(size for _, size in classes), len(live))
    locations = set(live.values())
    arcs: list[Arc] = []
    for pid, place in live.items():
        arcs.append(Arc(("@", place), ("p", pid)))
        arcs.append(Arc("anywhere", ("p", pid)))
        if floor:
            arcs.append(Arc(("p", pid), "sink", capacity=floor))
        if extra:
            arcs.append(Arc(("p", pid), "extra", capacity=1))
    if extra:
        arcs.append(Arc("extra", "sink", capacity=extra))
    for index, ((owner, where), size) in enumerate(classes):
        node = ("c", index)
        arcs.append(Arc("source", node, capacity=size))
        arcs.append(Arc(node, "anywhere", capacity=size))
        if where is not None and where in locations:
            arcs.append(Arc(node, ("@", where), weight=-1, capacity=size))
        if owner is not None:
            bonus = 1 if where is not None and live[owner] == where else 0
            arcs.append(Arc(node, ("p", owner), weight=-(weight + bonus), capacity=size))
    return arcs


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
    return len(_classes(task_names(tasks), metadata))


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
    containers = list(containers)
    sizes: dict[str, int] = dict.fromkeys(live, 0)
    for container in containers:
        sizes[container.processor_id] = len(container.tasks)
    owner = owners(containers)
    names = task_names(tasks)
    assigned = {name: owner[name] for name in names if name in owner}
    moved = tasks_moved(metadata.previous_task_to_processor, owner, tasks=names)
    local = tasks_kept_local(assigned, live, metadata.task_locality)
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


def stream_skew(
    tasks: Collection[TaskModel],
    metadata: GrouperMetadata,
    containers: Iterable[ContainerModel],
) -> int:
    """The worst stream's spread: over every stream (:func:`groupers.spread.stream_of`), the
    most minus the fewest of its tasks on one live processor (a processor without any counts as
    0), as Kafka Streams' ``AssignmentTestUtils.analyzeTaskAssignmentBalance`` per subtopology.
    """
    stream = {task.name: stream_of(task) for task in tasks}
    live = list(metadata.processor_locality)
    per: dict[str, Counter[str]] = {s: Counter(dict.fromkeys(live, 0)) for s in stream.values()}
    for container in containers:
        for name in container.tasks:
            if name in stream:
                per[stream[name]][container.processor_id] += 1
    return max((max(c.values()) - min(c.values()) for c in per.values() if c), default=0)
