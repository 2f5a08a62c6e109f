"""The state of one ``host-affinity`` assignment, and the moves its phases are made of.

:class:`Assignment` holds everything the phases of :func:`groupers.host_affinity.assign` share:
the balance bounds, what each processor keeps, the budgets, the location tree of unmatched
items (:mod:`groupers.tree`), and what has been placed or given up so far. Its methods are the
moves every phase is made of (with :func:`groupers.tree.sweep`, which visits the tree):

- :meth:`Assignment.place_movers`: tasks that must move take free room at one node;
- :meth:`Assignment.shed`: a processor gives up tasks (*sheds*) into free room at one node, as a
  predicate (a :data:`groupers.tree.Wanted`) accepts them.

Predicates are small and named (:meth:`Assignment.is_over_quota`,
:meth:`Assignment.keeps_location`, :func:`groupers.tree.gains_locality`, ...), in the style of
Faust's ``_can_assign``.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from groupers.api import GrouperMetadata
from groupers.locations import Path, location_path
from groupers.measures import balance_bounds
from groupers.tree import Candidate, Node, Route, Slots, Wanted, gains_locality

__all__ = ["Assignment"]


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
    stream: Mapping[str, str] | None = None  # task -> its stream (None: one stream)
    _paths: dict[str, Path] = field(default_factory=dict)

    @classmethod
    def start(
        cls,
        task_names: Collection[str],
        metadata: GrouperMetadata,
        balance_slack: int,
        order: list[str] | None = None,
        streams: Mapping[str, str] | None = None,
    ) -> Assignment:
        """Balance bounds, and every task either kept by its live previous processor or an
        orphan (budgets are set by the caller). ``order``: the task names in spread order
        (:func:`groupers.spread.spread_order`; None: name order); ``streams``: each task's
        stream (:func:`groupers.spread.stream_of`), dealt evenly over the processors that take
        tasks at one place (:meth:`deal`)."""
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
            stream=streams if order is not None else None,
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
        takes: list[tuple[str, int]] = []
        done = 0
        while len(tasks) > done and slots and (budget is None or done < budget):
            slot = slots[-1]
            take = min(slot.free, len(tasks) - done)
            if budget is not None:
                take = min(take, budget - done)
            takes.append((slot.processor_id, take))
            done += take
            slot.free -= take
            if not slot.free:
                slots.pop()
        if done:
            chunk = tasks[-done:]
            del tasks[-done:]
            chunk.reverse()
            self.deal(chunk, takes)
        return done

    def deal(self, chunk: list[str], takes: list[tuple[str, int]]) -> None:
        """Place ``chunk`` (tasks in spread order) on processors, ``takes`` giving how many each
        (in order). One stream: each processor takes the next run of the chunk. Several: the
        streams are dealt round-robin over the processors with room left, the largest stream
        first, the cursor carried from one stream to the next, so each processor holds floor or
        ceil of its share of every stream wherever the counts allow (Kafka Streams deals
        subtopologies the same way); a run of an interleaved order cannot do that when the
        counts differ or streams differ in size (issue 26)."""
        placed = self.placed
        if self.stream is None:
            start = 0
            for pid, take in takes:
                placed[pid].extend(chunk[start : start + take])
                start += take
            return
        by_stream: dict[str, list[str]] = {}
        for name in chunk:
            by_stream.setdefault(self.stream[name], []).append(name)
        streams = sorted(by_stream.values(), key=lambda names: -len(names))  # stable: first seen
        dealt = [name for names in streams for name in names]  # the cursor carries across streams
        ring = [(placed[pid], take) for pid, take in takes if take]
        done = 0
        while done < len(dealt):
            # whole rounds while every processor in the ring has room: the j-th takes every
            # len(ring)-th task from j on; the ones then full leave the ring, the rest go on
            # in order (a task costs O(1), a round O(processors))
            rounds = min(take for _, take in ring)
            block = dealt[done : done + rounds * len(ring)]
            for j, (tasks, _) in enumerate(ring):
                tasks.extend(block[j :: len(ring)])
            done += len(block)
            ring = [(tasks, take - rounds) for tasks, take in ring if take > rounds]

    def fill_level(self, tasks: list[str], slots: list[Slots], budget: int) -> int:
        """Like :meth:`fill` for optional room, but each task goes to the least loaded
        processor (ties: smallest id), so slack avoids moves and never piles tasks up."""
        order = self._least_loaded(slots, min(budget, len(tasks)), {})
        for pid in order:
            self.placed[pid].append(tasks.pop())
        return len(order)

    def _least_loaded(self, slots: list[Slots], places: int, more: Mapping[str, int]) -> list[str]:
        """Up to ``places`` places taken from ``slots``, one at a time on the least loaded
        processor (kept + placed + ``more``; ties: smallest id): their processors, in order."""
        kept, placed = self.kept, self.placed

        def load_of(pid: str) -> int:
            return len(kept[pid]) + len(placed[pid]) + more.get(pid, 0)

        heap = [(load_of(s.processor_id), s.processor_id, s) for s in slots if s.free]
        heapq.heapify(heap)
        order: list[str] = []
        while len(order) < places and heap:
            load, pid, slot = heapq.heappop(heap)
            order.append(pid)
            slot.free -= 1
            if slot.free:
                heapq.heappush(heap, (load + 1, pid, slot))
        slots[:] = [s for s in slots if s.free]
        return order

    def place_movers(self, node: Node) -> None:
        """Tasks that must move, at this node, into its mandatory room, then its optional
        room while the optional budget lasts. With several streams (a spread order) the
        counts come first and the tasks are then dealt by stream (:meth:`place_dealt`)."""
        if self.rank is not None and node.tasks and node.optional and self.optional_budget:
            self.place_dealt(node)
            return
        self.fill(node.tasks, node.mandatory, None)
        if self.optional_budget:
            self.optional_budget -= self.fill_level(node.tasks, node.optional, self.optional_budget)

    def place_dealt(self, node: Node) -> None:
        """The counts of :meth:`place_movers` (mandatory room in id order, then the optional
        budget to the least loaded) decided first, then the tasks dealt to them by stream
        (:meth:`deal`): filling mandatory room and then optional room one task at a time can
        give one processor two of a stream another has none of (issue 26)."""
        tasks, left = node.tasks, len(node.tasks)
        counts: Counter[str] = Counter()
        for slot in reversed(node.mandatory):  # id order
            take = min(slot.free, left)
            counts[slot.processor_id] += take
            slot.free -= take
            left -= take
        node.mandatory[:] = [s for s in node.mandatory if s.free]
        extra = self._least_loaded(node.optional, min(self.optional_budget, left), counts)
        counts.update(extra)
        self.optional_budget -= len(extra)
        takes = [(pid, counts[pid]) for pid in sorted(counts) if counts[pid]]
        total = sum(take for _, take in takes)
        if total:
            chunk = tasks[len(tasks) - total :]
            del tasks[len(tasks) - total :]
            chunk.reverse()
            self.deal(chunk, takes)

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
