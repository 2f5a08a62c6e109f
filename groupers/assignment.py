"""The state of one ``host-affinity`` assignment, and the moves its phases are made of.

:class:`Assignment` holds everything the phases of :func:`groupers.host_affinity.assign` share:
the balance bounds, what each processor keeps, the budgets, the location tree of unmatched
items (:class:`Node`), and what has been placed or given up so far. Its methods are the three
moves every phase is made of:

- :meth:`Assignment.place_movers`: tasks that must move take free room at one node;
- :meth:`Assignment.shed`: a processor gives up tasks (*sheds*) into free room at one node, as a
  predicate (a :data:`Wanted`) accepts them;
- :func:`sweep`: visit the location tree deepest first, passing leftovers up to the parent.

Predicates are small and named (:meth:`Assignment.is_over_quota`,
:meth:`Assignment.keeps_location`, :func:`gains_locality`, :func:`loses_nothing`, ...), in the
style of Faust's ``_can_assign``.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from groupers.api import GrouperMetadata
from groupers.locations import Path, location_path
from groupers.measures import balance_bounds

__all__ = [
    "Assignment",
    "Candidate",
    "Node",
    "Route",
    "Slots",
    "Wanted",
    "gains_locality",
    "loses_nothing",
    "sweep",
]


class Slots:
    """Free room on one processor."""

    __slots__ = ("free", "processor_id")

    def __init__(self, processor_id: str, free: int) -> None:
        self.processor_id = processor_id
        self.free = free


def _by_processor(slot: Slots) -> str:
    return slot.processor_id


class Candidate(NamedTuple):
    """A task its processor may (or must) give up.

    Local ones (recorded at their processor's exact location) only ever make optional sheds:
    forced sheds beyond the non-local tasks were turned into moving tasks up front.
    """

    closeness: int  # path components its recorded location shares with its processor's
    name: str
    processor_id: str
    is_local: bool  # recorded at its processor's exact location
    order: int = 0  # rank in the spread order (groupers.spread), 0 when that is name order

    def shed_order(self) -> tuple[bool, int, int, str, str]:
        """Non-local first (shedding them never costs an exact location), then the least
        close to their own processor, then in spread order."""
        return (self.is_local, self.closeness, self.order, self.name, self.processor_id)


class Node:
    """Unmatched items at one node of the location tree."""

    __slots__ = ("candidates", "mandatory", "optional", "tasks")

    def __init__(self) -> None:
        self.tasks: list[str] = []  # tasks that must move, recorded at this location
        self.mandatory: list[Slots] = []  # room below the lower bound (must be filled)
        self.optional: list[Slots] = []  # room between the lower and the upper bound
        self.candidates: list[Candidate] = []  # tasks a processor may (or must) give up


class Route(Enum):
    """What a shed predicate says of a candidate."""

    KEEP = "keep"  # not here
    ANY = "any"  # a forced shed if its processor owes one, else an optional one
    FORCED = "forced"  # only as a forced shed
    OPTIONAL = "optional"  # only as an optional shed


#: A shed predicate: (candidate, depth of the node offering room) -> route.
Wanted = Callable[[Candidate, int], Route]


def gains_locality(candidate: Candidate, depth: int) -> Route:
    """The room here shares more with the task's location than its own processor does."""
    return Route.ANY if candidate.closeness < depth else Route.KEEP


def loses_nothing(candidate: Candidate, depth: int) -> Route:
    """The room here shares with the task all its own processor did (and something)."""
    return Route.ANY if candidate.closeness == depth and depth > 0 else Route.KEEP


def anything(candidate: Candidate, depth: int) -> Route:
    """Whatever it costs (the last pass: nothing is left to lose)."""
    return Route.ANY


@dataclass
class Assignment:
    """One assignment in progress; see :func:`groupers.host_affinity.assign`."""

    processors: list[str]  # live processor ids, sorted
    lower: dict[str, int]  # live processor -> fewest tasks it may end with
    upper: dict[str, int]  # live processor -> most tasks it may end with
    processor_path: dict[str, Path]  # live processor -> its location path
    kept: dict[str, list[str]]  # live processor -> its previous tasks (name order)
    orphans: list[str]  # tasks with no live previous processor (new, or theirs is gone)
    optional_budget: int = 0  # moving tasks still to place in optional room
    supply_budget: int = 0  # optional sheds still to make
    nodes: defaultdict[Path, Node] = field(default_factory=lambda: defaultdict(Node))
    must_shed: dict[str, int] = field(default_factory=dict)  # forced sheds still due
    may_shed: dict[str, int] = field(default_factory=dict)  # optional sheds still allowed
    lossy_forced: dict[str, int] = field(default_factory=dict)  # forced sheds that must lose
    given_up: set[str] = field(default_factory=set)  # previous tasks that leave
    placed: dict[str, list[str]] = field(default_factory=dict)  # processor -> tasks it gains
    rank: dict[str, int] | None = None  # task -> rank in the spread order (None: name order)
    _paths: dict[str, Path] = field(default_factory=dict)

    @classmethod
    def start(
        cls,
        task_names: Collection[str],
        metadata: GrouperMetadata,
        balance_slack: int,
        order: list[str] | None = None,
    ) -> Assignment:
        """Balance bounds, and every task either kept by its live previous processor or an
        orphan (budgets are set by the caller). ``order``: the task names in spread order
        (:func:`groupers.spread.spread_order`; None: name order)."""
        locations = metadata.processor_locality
        processors = sorted(locations)
        names = order if order is not None else sorted(set(task_names))
        total = len(names)
        previous = metadata.previous_task_to_processor
        kept: dict[str, list[str]] = {pid: [] for pid in processors}
        orphans: list[str] = []
        for name in names:
            owner = previous.get(name)
            if owner is not None and owner in kept:
                kept[owner].append(name)
            else:
                orphans.append(name)
        lower, upper = balance_bounds(processors, total, metadata, balance_slack)
        state = cls(
            processors,
            lower=lower,
            upper=upper,
            processor_path={},
            kept=kept,
            orphans=orphans,
            placed={pid: [] for pid in processors},
            rank={name: rank for rank, name in enumerate(order)} if order is not None else None,
        )
        state.processor_path = {pid: state.path_of(locations[pid]) for pid in processors}
        return state

    # ------------------------------------------------------------------------ predicates

    def task_key(self) -> Callable[[str], object] | None:
        """The sort key of task names in spread order (None: name order)."""
        return self.rank.__getitem__ if self.rank is not None else None

    def order_of(self, name: str) -> int:
        """The task's rank in the spread order (0 when that is name order)."""
        return self.rank[name] if self.rank is not None else 0

    def path_of(self, location: str | None) -> Path:
        """The location's path (cached: many tasks share a location)."""
        if not location:
            return ()
        cached = self._paths.get(location)
        if cached is None:
            cached = self._paths[location] = location_path(location)
        return cached

    def keeps_location(self, where: Path, processor_id: str) -> bool:
        """A task recorded at ``where`` is at its exact location on this processor."""
        return bool(where) and where == self.processor_path[processor_id]

    def is_over_quota(self, processor_id: str) -> bool:
        """The processor still owes a forced shed (it holds more than the upper bound)."""
        return bool(self.must_shed.get(processor_id))

    def may_shed_optionally(self, processor_id: str) -> bool:
        """The processor may still give a task up to fill room below the lower bound."""
        return bool(self.may_shed.get(processor_id)) and bool(self.supply_budget)

    # ------------------------------------------------------------------------ moves

    def fill(self, tasks: list[str], slots: list[Slots], budget: int | None) -> int:
        """Pair tasks with slots, both taken from the END of their (reverse-sorted) lists.

        Returns how many tasks were placed (at most ``budget`` when given).
        """
        placed = self.placed
        done = 0
        while tasks and slots and (budget is None or done < budget):
            slot = slots[-1]
            take = min(slot.free, len(tasks))
            if budget is not None:
                take = min(take, budget - done)
            chunk = tasks[-take:]
            del tasks[-take:]
            chunk.reverse()
            placed[slot.processor_id].extend(chunk)
            done += take
            slot.free -= take
            if not slot.free:
                slots.pop()
        return done

    def fill_level(self, tasks: list[str], slots: list[Slots], budget: int) -> int:
        """Like :meth:`fill` for optional room, but each task goes to the least loaded
        processor (ties: smallest id), so slack avoids moves and never piles tasks up."""
        kept, placed = self.kept, self.placed
        heap = [
            (len(kept[s.processor_id]) + len(placed[s.processor_id]), s.processor_id, s)
            for s in slots
            if s.free
        ]
        heapq.heapify(heap)
        done = 0
        while tasks and heap and done < budget:
            load, pid, slot = heapq.heappop(heap)
            placed[pid].append(tasks.pop())
            slot.free -= 1
            done += 1
            if slot.free:
                heapq.heappush(heap, (load + 1, pid, slot))
        slots[:] = [s for s in slots if s.free]
        return done

    def place_movers(self, node: Node) -> None:
        """Tasks that must move, at this node, into its mandatory room, then its optional
        room while the optional budget lasts."""
        self.fill(node.tasks, node.mandatory, None)
        if self.optional_budget:
            self.optional_budget -= self.fill_level(node.tasks, node.optional, self.optional_budget)

    def gain(self, node: Node, depth: int) -> None:
        """Pass A at one node: only matches that gain locality. Moving tasks take the room
        nearest their location; a shed is made where the task's location shares more with the
        room's than with its own processor's. The root gains nothing: left to pass B."""
        if depth:
            self.place_movers(node)
            self.shed(node, gains_locality, depth)

    def place_one(self, name: str, node: Node, use_optional: bool) -> bool:
        """One task into this node's mandatory room, else (if allowed) its optional room."""
        if self.fill([name], node.mandatory, None):
            return True
        if use_optional and self.optional_budget and self.fill_level([name], node.optional, 1):
            self.optional_budget -= 1
            return True
        return False

    def shed(
        self,
        node: Node,
        wanted: Wanted,
        depth: int,
        on_shed: Callable[[Candidate], None] | None = None,
    ) -> None:
        """Give up the candidates here that ``wanted`` accepts, while quotas and room last.

        Candidates are tried in :meth:`Candidate.shed_order`; ``on_shed`` hears of every
        candidate given up.
        """
        if not node.candidates or not (node.mandatory or node.optional):
            return
        node.candidates.sort(key=Candidate.shed_order)
        remaining: list[Candidate] = []
        for candidate in node.candidates:
            route = wanted(candidate, depth)
            if route is not Route.KEEP and self._give_up(candidate, route, node, depth):
                if on_shed:
                    on_shed(candidate)
            else:
                remaining.append(candidate)
        node.candidates = remaining

    def _give_up(self, candidate: Candidate, route: Route, node: Node, depth: int) -> bool:
        """A forced shed if the route allows one and the processor owes one, else an optional
        shed if the route allows one and the budget lasts."""
        if route is not Route.OPTIONAL and self._forced_shed(candidate, node, depth):
            return True
        return route is not Route.FORCED and self._optional_shed(candidate, node)

    def _forced_shed(self, candidate: Candidate, node: Node, depth: int) -> bool:
        pid = candidate.processor_id
        if candidate.is_local or not self.is_over_quota(pid):
            return False
        if not self.place_one(candidate.name, node, True):
            return False
        self.must_shed[pid] -= 1
        self.given_up.add(candidate.name)
        loses = candidate.closeness > depth
        self.lossy_forced[pid] = max(0, self.lossy_forced.get(pid, 0) - loses)
        return True

    def _optional_shed(self, candidate: Candidate, node: Node) -> bool:
        pid = candidate.processor_id
        if not self.may_shed_optionally(pid) or not self.place_one(candidate.name, node, False):
            return False
        self.may_shed[pid] -= 1
        self.supply_budget -= 1
        self.given_up.add(candidate.name)
        return True

    # ------------------------------------------------------------------------ layout

    def positioned(self, leftovers: Node) -> defaultdict[Path, Node]:
        """Lay leftovers out again: slots at their processors, candidates at what they can keep
        (the part of their location shared with their processor), tasks at the root."""
        layout: defaultdict[Path, Node] = defaultdict(Node)
        path = self.processor_path
        for slot in leftovers.mandatory:
            layout[path[slot.processor_id]].mandatory.append(slot)
        for slot in leftovers.optional:
            layout[path[slot.processor_id]].optional.append(slot)
        for candidate in leftovers.candidates:
            layout[path[candidate.processor_id][: candidate.closeness]].candidates.append(candidate)
        layout[()].tasks.extend(leftovers.tasks)
        return layout

    def check_done(self, root: Node) -> None:
        """Raise if the last pass left work undone (a bug, never an input error)."""
        if (
            root.tasks
            or root.mandatory
            or self.optional_budget
            or self.supply_budget
            or any(self.must_shed.values())
        ):
            raise AssertionError(
                f"host-affinity left work undone: {len(root.tasks)} tasks, "
                f"{sum(s.free for s in root.mandatory)} slots, "
                f"budgets {self.optional_budget}/{self.supply_budget}"
            )

    def result(self) -> dict[str, list[str]]:
        """Processor id -> its tasks: what it kept (less what it gave up), then what it got."""
        result: dict[str, list[str]] = {}
        for pid in self.processors:
            mine = self.kept[pid]
            if self.given_up:
                mine = [name for name in mine if name not in self.given_up]
            result[pid] = mine + self.placed[pid]
        return result


def sweep(
    nodes: defaultdict[Path, Node],
    visit: Callable[[Node, int], None],
    rise: bool = True,
    key: Callable[[str], object] | None = None,
) -> Node:
    """Visit nodes deepest first, passing leftovers up (unless ``rise`` is false: then each node
    is visited with only its own items); return the root with what is left. Tasks are taken
    in ``key`` order (spread order; None: name order)."""
    for path in list(nodes):
        for depth in range(len(path)):
            nodes[path[:depth]]  # create the ancestors
    for path in sorted(nodes, key=lambda p: (-len(p), p)):
        node = nodes[path]
        # Reverse order: fill() consumes from the end, so the smallest names/ids go first.
        node.tasks.sort(key=key, reverse=True)  # type: ignore[arg-type]
        node.mandatory.sort(key=_by_processor, reverse=True)
        node.optional.sort(key=_by_processor, reverse=True)
        visit(node, len(path))
        if path and rise:
            parent = nodes[path[:-1]]
            parent.tasks.extend(node.tasks)
            parent.mandatory.extend(node.mandatory)
            parent.optional.extend(node.optional)
            parent.candidates.extend(node.candidates)
    return nodes[()]
