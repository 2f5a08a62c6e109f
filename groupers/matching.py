"""Matchings and flows: the one graph module of the groupers (as Kafka Streams' ``Graph``).

Four problems, four solvers; which, and why (figures measured on a shared 2-core machine, so
only their ratios mean much):

- :func:`max_flow_bipartite`: a maximum flow from left nodes (each with a supply) to right nodes
  (each with room) over edges of given capacity, by breadth-first augmenting paths in sorted
  order. ``host-affinity`` uses it to place forced sheds at their tasks' exact locations
  (processors -> locations). **Ours**, because the flow it picks decides which tasks move, and
  the grouper must keep giving the same answers (I6, and identical to earlier versions);
  networkx's ``maximum_flow`` finds a flow of the same value but another one, and networkx is
  not a runtime dependency. On realistic inputs (locality recorded where the task ran: every
  benchmark scenario) the flow is empty or tiny. On adversarial ones (every task's locality
  stale and random, half the processors twice over quota, so every unit competes) networkx is
  faster: T=20,000, P=200, 50 hosts (4,815 edges, 10,000 units): ours 0.33 s, networkx 0.14 s;
  T=50,000, P=500, 100 hosts (21,446 edges): ours 4.5 s, networkx 0.7 s; T=100,000, P=1,000
  (42,775 edges, 50,000 units): ours 17 s, networkx 1.3 s. The earlier unit-by-unit version
  took 1.4 s and 17 s on the first two; units with a direct edge to free room now go in bulk,
  with the same result. Making the worst case fast means accepting other (equally good)
  answers: a decision for the grouper's owner, not a refactoring.
- :func:`max_flow`: a maximum flow on any small network, by Dinic's algorithm, each node's arcs
  tried in the order given. ``host-affinity``'s warm-up uses it to find the moves to caught-up
  copies that fill the room balance wants (a three-layer network: processors that must shed,
  their tasks, processors with room; :mod:`groupers.holdback`). **Ours**, for the same reasons
  as above (the order of the arcs is the caller's preference, and networkx is not a runtime
  dependency); the network holds only tasks with caught-up copies, so it is small.
- :func:`max_weight_assignment`: rows -> distinct columns maximising the total weight
  (Hungarian algorithm, O(n^2 m)). Key groups use it to remap contiguous ranges on a
  parallelism change. **Ours**: scipy (``linear_sum_assignment``) is not a dependency, and
  networkx's general ``max_weight_matching`` (blossom) finds the same total weight 15 to 150
  times slower: 16 x 16 (8 -> 16 ranges) 0.2 ms against 3.5 ms, 128 x 128 (64 -> 128) 9 ms
  against 136 ms, 96 x 128 (128 -> 96) 4.5 ms against 670 ms; and it breaks ties differently.
- :func:`min_cost_flow`: a min-cost flow by **networkx** (``network_simplex``): the oracles of
  :mod:`groupers.testing.oracles` price every balanced answer with it. Fast enough there (the
  class-compressed network of T=100,000, P=1,000 solves in seconds), used only by tests and
  benchmarks, and an independent, well-kept solver is what an oracle should be. networkx is
  imported when it is called, so the product never needs it (it stays a test dependency).

Pure: no I/O, no project imports.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

__all__ = ["Arc", "max_flow", "max_flow_bipartite", "max_weight_assignment", "min_cost_flow"]

L = TypeVar("L", bound="SupportsRichComparison")
N = TypeVar("N", bound=Hashable)
R = TypeVar("R", bound="SupportsRichComparison")


# ----------------------------------------------------------------------------- max flow (ours)


def max_flow_bipartite(
    supply: Mapping[L, int],
    room: Mapping[R, int],
    edges: Mapping[L, Mapping[R, int]],
    *,
    order: Sequence[L] | None = None,
) -> dict[tuple[L, R], int]:
    """A maximum flow ``(left, right) -> units`` (zero entries possible).

    ``supply[left]`` units leave each left node, at most ``room[right]`` units reach each right
    node, at most ``edges[left][right]`` units use each edge. Left nodes are served in sorted
    order, each unit by the breadth-first augmenting path that tries right nodes in sorted order
    (a full right node can hand one of its units back to another left node, which then needs a
    right node of its own), so the result depends only on the inputs.

    With ``order`` (left nodes of ``edges``, each once; only those are served) left nodes are
    served in that order and each tries its right nodes in the order of ``edges[left]`` (its
    preference): the caller decides, deterministically, who goes first and where.

    Units that have a direct edge to free room go in bulk: the path search would take the first
    such right node for each of them in turn, so they are pushed at once.
    """
    if order is None:
        adjacency = {left: sorted(edges[left]) for left in sorted(edges)}
    else:
        adjacency = {left: list(edges[left]) for left in order}
    graph = _Bipartite(adjacency, edges, room, defaultdict(int))
    for left in graph.adjacency:
        remaining = supply[left]
        while remaining:
            pushed = graph.push_direct(left, remaining)
            if not pushed and not graph.augment(left):
                break
            remaining -= pushed or 1
    return graph.flow


@dataclass
class _Bipartite:
    adjacency: dict[Any, list[Any]]  # left -> its right nodes, sorted
    capacity: Mapping[Any, Mapping[Any, int]]
    room: Mapping[Any, int]
    used: dict[Any, int]
    flow: dict[tuple[Any, Any], int] = field(default_factory=lambda: defaultdict(int))
    holders: dict[Any, list[Any]] = field(default_factory=lambda: defaultdict(list))

    def __post_init__(self) -> None:
        for left, rights in self.adjacency.items():
            for right in rights:
                self.holders[right].append(left)  # in service order of left nodes

    def push_direct(self, left: Any, most: int) -> int:
        """Up to ``most`` units along the first edge (sorted) with residual capacity into a
        right node with free room; how many (0: no such edge)."""
        flow, used, room, capacity = self.flow, self.used, self.room, self.capacity[left]
        for right in self.adjacency[left]:
            residual = capacity[right] - flow[(left, right)]
            free = room[right] - used[right]
            if residual > 0 and free > 0:
                units = min(most, residual, free)
                flow[(left, right)] += units
                used[right] += units
                return units
        return 0

    def augment(self, start: Any) -> bool:
        """One more unit from ``start``, along the shortest augmenting path (False if none)."""
        capacity, flow = self.capacity, self.flow
        via_left: dict[Any, Any] = {}  # right node <- the left node that reached it
        via_right: dict[Any, Any] = {}  # left node <- the full right node it gives a unit up at
        seen = {start}
        frontier = [start]
        while frontier:
            following: list[Any] = []
            for left in frontier:
                for right in self.adjacency[left]:
                    if right in via_left or flow[(left, right)] >= capacity[left][right]:
                        continue
                    via_left[right] = left
                    if self.used[right] < self.room[right]:
                        self.used[right] += 1
                        self._shift(start, right, via_left, via_right)
                        return True
                    for other in self.holders[right]:
                        if other not in seen and flow[(other, right)] > 0:
                            seen.add(other)
                            via_right[other] = right
                            following.append(other)
            frontier = following
        return False

    def _shift(
        self, start: Any, right: Any, via_left: Mapping[Any, Any], via_right: Mapping[Any, Any]
    ) -> None:
        """Walk the augmenting path back from ``right``, shifting one unit along it."""
        while True:
            owner = via_left[right]
            self.flow[(owner, right)] += 1
            if owner == start:
                return
            right = via_right[owner]
            self.flow[(owner, right)] -= 1


# --------------------------------------------------------------------- general max flow (ours)


def max_flow(arcs: Iterable[tuple[N, N, int]], source: N, sink: N) -> dict[tuple[N, N], int]:
    """A maximum flow from ``source`` to ``sink``: ``(tail, head) -> units`` for every arc given.

    ``arcs`` are ``(tail, head, capacity)``, at most one per ordered pair. Dinic's algorithm:
    breadth-first levels, then blocking flows by depth-first search (iterative, so long paths do
    not hit the recursion limit) that tries each node's arcs in the order given: the first
    paths found are the preferred ones, and the result depends only on the inputs.
    O(E sqrt(V)) on unit-capacity networks such as matchings with side constraints.
    """
    index: dict[N, int] = {}
    heads: list[int] = []  # arc e and its residual twin e ^ 1
    room: list[int] = []
    out: list[list[int]] = []
    given: list[tuple[N, N, int]] = []

    def node(name: N) -> int:
        found = index.get(name)
        if found is None:
            found = index[name] = len(out)
            out.append([])
        return found

    for tail, head, capacity in arcs:
        u, v = node(tail), node(head)
        given.append((tail, head, len(heads)))
        out[u].append(len(heads))
        heads.append(v)
        room.append(capacity)
        out[v].append(len(heads))
        heads.append(u)
        room.append(0)
    if source in index and sink in index:
        _blocking_flows(out, heads, room, index[source], index[sink])
    return {(tail, head): room[e ^ 1] for tail, head, e in given}


def _blocking_flows(
    out: list[list[int]], heads: list[int], room: list[int], source: int, sink: int
) -> None:
    """Augment ``room`` (residual capacities) to a maximum flow, phase by phase."""
    while True:
        level = [-1] * len(out)
        level[source] = 0
        frontier = [source]
        while frontier and level[sink] < 0:
            following: list[int] = []
            for u in frontier:
                for e in out[u]:
                    v = heads[e]
                    if room[e] > 0 and level[v] < 0:
                        level[v] = level[u] + 1
                        following.append(v)
            frontier = following
        if level[sink] < 0:
            return
        cursor = [0] * len(out)
        while _augment_once(out, heads, room, level, cursor, source, sink):
            pass


def _augment_once(
    out: list[list[int]],
    heads: list[int],
    room: list[int],
    level: list[int],
    cursor: list[int],
    source: int,
    sink: int,
) -> bool:
    """One augmenting path along increasing levels (False when the phase is blocked)."""
    path: list[int] = []
    u = source
    while u != sink:
        arcs = out[u]
        while cursor[u] < len(arcs):
            e = arcs[cursor[u]]
            if room[e] > 0 and level[heads[e]] == level[u] + 1:
                break
            cursor[u] += 1
        else:
            if u == source:
                return False
            level[u] = -1  # a dead end: never try it again in this phase
            e = path.pop()
            u = heads[e ^ 1]
            cursor[u] += 1
            continue
        path.append(e)
        u = heads[e]
    units = min(room[e] for e in path)
    for e in path:
        room[e] -= units
        room[e ^ 1] += units
    return True


# ----------------------------------------------------------------------------- assignment (ours)


def max_weight_assignment(weights: list[list[int]]) -> list[int]:
    """Row -> column maximising the total weight (rows <= columns; Hungarian, O(n^2 m))."""
    n = len(weights)
    m = len(weights[0]) if n else 0
    if n == 0:
        return []
    top = max(max(row) for row in weights)
    cost = [[top - w for w in row] for row in weights]
    u = [0.0] * (n + 1)
    v = [0.0] * (m + 1)
    p = [0] * (m + 1)  # column -> row (1-based), 0 = free
    way = [0] * (m + 1)
    for i in range(1, n + 1):
        p[0] = i
        j0 = _shortest_augmenting_column(cost, u, v, p, way)
        while j0:
            j1 = way[j0]
            p[j0] = p[j1]
            j0 = j1
    result = [0] * n
    for j in range(1, m + 1):
        if p[j]:
            result[p[j] - 1] = j - 1
    return result


def _shortest_augmenting_column(
    cost: list[list[int]], u: list[float], v: list[float], p: list[int], way: list[int]
) -> int:
    """Dijkstra-like step of the Hungarian algorithm: grow the alternating tree of row ``p[0]``
    until it reaches a free column, updating the potentials; returns that column."""
    m = len(v) - 1
    inf = float("inf")
    minv = [inf] * (m + 1)
    used = [False] * (m + 1)
    j0 = 0
    while True:
        used[j0] = True
        i0, delta, j1 = p[j0], inf, 0
        for j in range(1, m + 1):
            if not used[j]:
                cur = cost[i0 - 1][j - 1] - u[i0] - v[j]
                if cur < minv[j]:
                    minv[j], way[j] = cur, j0
                if minv[j] < delta:
                    delta, j1 = minv[j], j
        for j in range(m + 1):
            if used[j]:
                u[p[j]] += delta
                v[j] -= delta
            else:
                minv[j] -= delta
        j0 = j1
        if p[j0] == 0:
            return j0


# ----------------------------------------------------------------------------- min-cost flow


@dataclass(frozen=True)
class Arc:
    """A directed edge ``tail -> head``; ``capacity`` None means unbounded."""

    tail: Hashable
    head: Hashable
    weight: int = 0
    capacity: int | None = None


def min_cost_flow(
    arcs: Iterable[Arc], demands: Mapping[Hashable, int]
) -> tuple[int, dict[Any, dict[Any, int]]]:
    """Cost and flow (``flow[tail][head]``) of a min-cost flow meeting ``demands`` (negative:
    supply), by networkx's network simplex (imported here: a test and benchmark dependency)."""
    import networkx as nx

    graph = nx.DiGraph()
    for node, demand in demands.items():
        graph.add_node(node, demand=demand)
    for arc in arcs:
        if arc.capacity is None:
            graph.add_edge(arc.tail, arc.head, weight=arc.weight)
        else:
            graph.add_edge(arc.tail, arc.head, capacity=arc.capacity, weight=arc.weight)
    cost, flow = nx.network_simplex(graph)
    return int(cost), flow
