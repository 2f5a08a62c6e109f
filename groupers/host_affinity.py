"""``host-affinity``: balanced, movement-minimal, locality-maximal task assignment.

Theory of operation
===================

Priorities, strictly in this order (DESIGN.md "Grouper contract"):

1. **Balance.** With T tasks and P live processors every processor ends with ``floor(T/P)`` or
   ``ceil(T/P)`` tasks; the option ``balance_slack=k`` widens that to
   ``[floor(T/P) - k, ceil(T/P) + k]``.
2. **Stickiness.** As few tasks as possible change processor. Every processor keeps
   ``min(previous tasks, upper bound)`` of its previous tasks. The tasks that must move are the
   *orphans* (previous processor gone, or new tasks) and the *mandatory sheds* (a processor above
   the upper bound). If they cannot fill every processor up to the lower bound, exactly the
   missing number of *optional sheds* is taken from processors above the lower bound; otherwise
   exactly the surplus goes into *optional slots* (room between a processor's count and the
   upper bound). Either way the number of moves equals the lower bound (orphans plus what
   survivors must shed, the ``T mod P`` larger targets going to the fullest survivors).
3. **Locality.** Moving tasks are matched to free slots on the tree of location ids
   (``zone/rack/host``; a flat id is a one-level tree), deepest nodes first: at every node, tasks
   and slots still unmatched below it are paired, then the leftovers go up to the parent. For
   tree-shaped (ultrametric) similarity this greedy pairs as many tasks as possible within every
   subtree at once, so it maximises the tasks kept at their exact location, then those kept in
   their rack, then in their zone. Within a node, mandatory slots are filled before optional
   ones so the optional budget is spent where it buys locality. A processor that must shed
   gives up first the tasks whose recorded location is farthest from it (keeping one whose
   state is not there buys nothing).
4. **Determinism.** Every choice is made in sorted order of task names, processor ids and
   location paths, never in hash or input order, so the output depends only on the inputs
   (invariant I6).

Cost: O(T log T + P log P) time (sorting dominates; each task rises at most ``depth`` levels of
the location tree) and O(T + P) memory.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Literal

from groupers.api import GrouperError, GrouperMetadata, build_containers, tasks_by_name
from groupers.locations import Path, common_depth, location_path
from groupers.matching import max_flow_bipartite
from groupers.virtual import inherit_locality, needs_inheritance
from metadata.model import ContainerModel, TaskModel

__all__ = ["HostAffinityGrouper", "assign"]


@dataclass(frozen=True)
class HostAffinityGrouper:
    """The default TaskNameGrouper: previous processor, else same location, else nearest."""

    balance_slack: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.balance_slack, bool) or not isinstance(self.balance_slack, int):
            raise GrouperError(f"balance_slack must be an integer, got {self.balance_slack!r}")
        if self.balance_slack < 0:
            raise GrouperError(f"balance_slack must be >= 0, got {self.balance_slack}")

    def group(self, tasks: Collection[TaskModel], metadata: GrouperMetadata) -> set[ContainerModel]:
        by_name = tasks_by_name(tasks)
        if needs_inheritance(
            by_name,
            metadata.task_locality,
            metadata.previous_task_to_processor,
            metadata.previous_task_to_ssps,
        ):  # SEP-32 split/merge: history recorded under the old virtual task names
            locality, previous = inherit_locality(
                by_name.values(),
                metadata.task_locality,
                metadata.previous_task_to_ssps,
                metadata.previous_task_to_processor,
            )
            metadata = GrouperMetadata(
                metadata.processor_locality, locality, previous, metadata.previous_task_to_ssps
            )
        assignment = assign(list(by_name), metadata, balance_slack=self.balance_slack)
        return build_containers(assignment, by_name, metadata.processor_locality)


# -------------------------------------------------------------------------- the algorithm


class _Slots:
    """Free room on one processor."""

    __slots__ = ("free", "processor_id")

    def __init__(self, processor_id: str, free: int) -> None:
        self.processor_id = processor_id
        self.free = free


# A task its processor may give up: (closeness to that processor's location, task, processor,
# whether it is local there). Local ones only ever make optional sheds: forced sheds beyond the
# non-local tasks were turned into moving tasks up front.
_Candidate = tuple[int, str, str, bool]


def _match_exact(
    nodes: Mapping[Path, _Node], quota: Mapping[str, int], optional_budget: int
) -> list[tuple[Path, tuple[str, int]]]:
    """Most forced sheds placed at their tasks' exact locations: a max flow from processors
    (capacity: sheds still due) through candidates to locations (capacity: free room), by
    augmenting paths. Returns (location, (processor, how many)) pairs, deterministically."""
    edges: dict[str, dict[Path, int]] = defaultdict(dict)
    room: dict[Path, int] = {}
    for path, node in nodes.items():
        if not path:
            continue
        free = sum(s.free for s in node.mandatory)
        if optional_budget:
            free += sum(s.free for s in node.optional)
        if not free:
            continue
        for closeness, _, pid, is_local in node.candidates:
            if not is_local and closeness < len(path) and quota.get(pid):
                edges[pid][path] = edges[pid].get(path, 0) + 1
        room[path] = free
    if not edges:
        return []
    flow = max_flow_bipartite(quota, room, edges)
    return [(path, (pid, count)) for (pid, path), count in sorted(flow.items()) if count > 0]


Route = Literal["forced", "optional"]
FORCED: Route = "forced"
OPTIONAL: Route = "optional"


def _shed_order(candidate: _Candidate) -> tuple[bool, int, str, str]:
    closeness, name, pid, is_local = candidate
    return (is_local, closeness, name, pid)


class _Node:
    """Unmatched items at one node of the location tree."""

    __slots__ = ("candidates", "mandatory", "optional", "tasks")

    def __init__(self) -> None:
        self.tasks: list[str] = []  # tasks that must move, recorded at this location
        self.mandatory: list[_Slots] = []  # room below the lower bound (must be filled)
        self.optional: list[_Slots] = []  # room between the lower and the upper bound
        self.candidates: list[_Candidate] = []  # tasks a processor may (or must) give up


def assign(
    task_names: Collection[str],
    metadata: GrouperMetadata,
    *,
    balance_slack: int = 0,
) -> dict[str, list[str]]:
    """Processor id -> task names, by the priorities of the module docstring.

    Every live processor appears (possibly with no task). With no live processor the answer is
    empty (and the caller's validation reports the unassigned tasks).
    """
    locations = metadata.processor_locality
    processors = sorted(locations)
    names = sorted(set(task_names))
    if not processors:
        return {}
    total, count = len(names), len(processors)
    lower = max(0, total // count - balance_slack)
    upper = -(-total // count) + balance_slack

    previous = metadata.previous_task_to_processor
    task_locality = metadata.task_locality
    kept: dict[str, list[str]] = {pid: [] for pid in processors}
    orphans: list[str] = []
    for name in names:
        owner = previous.get(name)
        if owner is not None and owner in kept:
            kept[owner].append(name)
        else:
            orphans.append(name)

    path_cache: dict[str, Path] = {}

    def path_of(location: str | None) -> Path:
        if not location:
            return ()
        cached = path_cache.get(location)
        if cached is None:
            cached = path_cache[location] = location_path(location)
        return cached

    processor_path = {pid: path_of(locations[pid]) for pid in processors}
    keep_count = {pid: min(len(kept[pid]), upper) for pid in processors}
    moving_total = len(orphans) + sum(len(kept[pid]) - keep_count[pid] for pid in processors)
    mandatory_total = sum(max(0, lower - keep_count[pid]) for pid in processors)
    # Exactly one of these is non-zero (or both are zero): the surplus of moving tasks goes to
    # optional slots, or the shortfall is made up by optional sheds.
    optional_budget = max(0, moving_total - mandatory_total)
    supply_budget = max(0, mandatory_total - moving_total)

    nodes: dict[Path, _Node] = defaultdict(_Node)
    given_up: set[str] = set()
    # Sheds a processor must still make from its non-local tasks, and may make optionally.
    must_shed: dict[str, int] = {}
    may_shed: dict[str, int] = {}
    lossy_forced: dict[str, int] = {}  # pass B: forced sheds that cannot avoid a loss
    for name in orphans:
        nodes[path_of(task_locality.get(name))].tasks.append(name)
    for pid in processors:
        here = processor_path[pid]
        node = nodes[here]
        have = keep_count[pid]
        if have < lower:
            node.mandatory.append(_Slots(pid, lower - have))
        if optional_budget and upper > max(have, lower):
            node.optional.append(_Slots(pid, upper - max(have, lower)))
        excess = len(kept[pid]) - have
        optional = have - lower if supply_budget and have > lower else 0
        if not excess and not optional:
            continue
        local: list[str] = []
        for name in kept[pid]:
            where = path_of(task_locality.get(name))
            if where == here and here:
                local.append(name)
            else:
                nodes[where].candidates.append((common_depth(where, here), name, pid, False))
        non_local = len(kept[pid]) - len(local)
        # Sheds beyond the non-local tasks must give up local ones: they move for certain, so
        # they join the moving tasks at this location (the last names go).
        forced_local = max(0, excess - non_local)
        if forced_local:
            leaving = local[len(local) - forced_local :]
            node.tasks.extend(leaving)
            given_up.update(leaving)
            local = local[: len(local) - forced_local]
        if excess - forced_local:
            must_shed[pid] = excess - forced_local
        if optional:
            may_shed[pid] = optional
            # Local tasks are interchangeable here and at most ``optional`` of them can go.
            depth = len(here)
            node.candidates.extend(
                (depth, name, pid, True) for name in local[len(local) - optional :]
            )

    placed: dict[str, list[str]] = {pid: [] for pid in processors}

    def fill(tasks: list[str], slots: list[_Slots], budget: int | None) -> int:
        """Pair tasks with slots, both taken from the END of their (reverse-sorted) lists.

        Returns how many tasks were placed (at most ``budget`` when given).
        """
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

    def by_processor(slot: _Slots) -> str:
        return slot.processor_id

    def fill_level(tasks: list[str], slots: list[_Slots], budget: int) -> int:
        """Like fill() for optional room, but each task goes to the least loaded processor
        (ties: smallest id), so slack is used to avoid moves, never to pile tasks up."""
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

    def place_one(name: str, node: _Node, use_optional: bool) -> bool:
        nonlocal optional_budget
        if fill([name], node.mandatory, None):
            return True
        if use_optional and optional_budget and fill_level([name], node.optional, 1):
            optional_budget -= 1
            return True
        return False

    def shed(
        node: _Node,
        wanted: Callable[[_Candidate, int], bool | Route],
        depth: int,
        on_shed: Callable[[_Candidate], None] | None = None,
    ) -> None:
        """Give up the candidates here that ``wanted`` accepts, while quotas and room last.

        ``wanted`` answers False (keep it), True (a forced shed if its processor owes one, else
        an optional one), "forced" or "optional" (only that kind). Non-local candidates go first
        (shedding them never costs an exact location), then the least close to their own
        processor. ``on_shed`` hears of every candidate given up.
        """
        nonlocal supply_budget
        if not node.candidates or not (node.mandatory or node.optional):
            return
        node.candidates.sort(key=_shed_order)
        remaining: list[_Candidate] = []
        for candidate in node.candidates:
            _, name, pid, is_local = candidate
            route = wanted(candidate, depth)
            if not route:
                remaining.append(candidate)
            elif (
                route != OPTIONAL
                and not is_local
                and must_shed.get(pid)
                and place_one(name, node, True)
            ):
                must_shed[pid] -= 1
                given_up.add(name)
                lossy_forced[pid] = max(0, lossy_forced.get(pid, 0) - (candidate[0] > depth))
                if on_shed:
                    on_shed(candidate)
            elif (
                route != FORCED
                and may_shed.get(pid)
                and supply_budget
                and place_one(name, node, False)
            ):
                may_shed[pid] -= 1
                supply_budget -= 1
                given_up.add(name)
                if on_shed:
                    on_shed(candidate)
            else:
                remaining.append(candidate)
        node.candidates = remaining

    def sweep(
        nodes: dict[Path, _Node], visit: Callable[[_Node, int], None], rise: bool = True
    ) -> _Node:
        """Visit nodes deepest first, passing leftovers up (unless ``rise`` is false: then each
        node is visited with only its own items); return the root with what is left."""
        for path in list(nodes):
            for depth in range(len(path)):
                nodes[path[:depth]]
        for path in sorted(nodes, key=lambda p: (-len(p), p)):
            node = nodes[path]
            # Reverse order: fill() consumes from the end, so the smallest names/ids go first.
            node.tasks.sort(reverse=True)
            node.mandatory.sort(key=by_processor, reverse=True)
            node.optional.sort(key=by_processor, reverse=True)
            visit(node, len(path))
            if path and rise:
                parent = nodes[path[:-1]]
                parent.tasks.extend(node.tasks)
                parent.mandatory.extend(node.mandatory)
                parent.optional.extend(node.optional)
                parent.candidates.extend(node.candidates)
        return nodes[()]

    # Pass A: only matches that gain locality. Tasks that must move take the room nearest their
    # location; a shed is made where the task's location shares more with the room's than with
    # its own processor's.
    def gain(node: _Node, depth: int) -> None:
        nonlocal optional_budget
        if not depth:
            return  # the root gains nothing: leave it to pass B
        fill(node.tasks, node.mandatory, None)
        if optional_budget:
            optional_budget -= fill_level(node.tasks, node.optional, optional_budget)
        shed(node, lambda candidate, d: candidate[0] < d, depth)

    # Exact locations first, whatever their depth (a flat "host-5" beside "zone-a/rack-0/host-0"),
    # then the nearest ones, deepest first.
    def movers_only(node: _Node, depth: int) -> None:
        nonlocal optional_budget
        if depth:
            fill(node.tasks, node.mandatory, None)
            if optional_budget:
                optional_budget -= fill_level(node.tasks, node.optional, optional_budget)

    sweep(nodes, movers_only, rise=False)
    if must_shed:
        # Forced sheds compete for the room at their exact locations (one processor's quota,
        # several locations; one location, several processors): match them exactly.
        for path, (owner, share) in _match_exact(nodes, must_shed, optional_budget):
            node = nodes[path]
            chosen = [c for c in node.candidates if c[2] == owner and not c[3]]
            chosen.sort(key=_shed_order)
            taken = set()
            for candidate in chosen[:share]:
                if place_one(candidate[1], node, True):
                    must_shed[candidate[2]] -= 1
                    given_up.add(candidate[1])
                    taken.add(candidate)
            node.candidates = [c for c in node.candidates if c not in taken]
    sweep(nodes, gain, rise=False)

    # Optional sheds are made whatever happens; those that non-local tasks cannot make cost an
    # exact location unless a local task moves to another processor at its own location. Make
    # those zero-loss moves now, before rack- or zone-level matches take that room.
    if supply_budget:
        non_local_left: dict[str, int] = defaultdict(int)
        for node in nodes.values():
            for _, _, pid, is_local in node.candidates:
                if not is_local:
                    non_local_left[pid] += 1
        # Optional sheds each processor's non-local tasks can make: kept for them.
        reserved = {
            pid: min(left, max(0, non_local_left[pid] - must_shed.get(pid, 0)))
            for pid, left in may_shed.items()
        }
        shortfall = supply_budget - sum(reserved.values())

        def count_down(candidate: _Candidate) -> None:
            nonlocal shortfall
            shortfall -= 1

        def zero_loss_local(node: _Node, depth: int) -> None:
            shed(
                node,
                lambda c, d: (
                    OPTIONAL
                    if c[3]
                    and c[0] == d
                    and shortfall > 0
                    and may_shed.get(c[2], 0) > reserved.get(c[2], 0)
                    else False
                ),
                depth,
                count_down,
            )

        if shortfall > 0:
            sweep(nodes, zero_loss_local, rise=False)

    root = sweep(nodes, gain)

    # Pass B: place what is left, losing as little locality as possible. A candidate stands at
    # the part of its location it shares with its own processor (what it can keep); slots stand
    # at their processors; tasks with nowhere near to go stand at the root.
    def positioned(leftovers: _Node) -> dict[Path, _Node]:
        """Lay the leftovers out again: slots at their processors, candidates at what they can
        keep, tasks with nowhere near to go at the root."""
        layout: dict[Path, _Node] = defaultdict(_Node)
        for slot in leftovers.mandatory:
            layout[processor_path[slot.processor_id]].mandatory.append(slot)
        for slot in leftovers.optional:
            layout[processor_path[slot.processor_id]].optional.append(slot)
        for candidate in leftovers.candidates:
            closeness, _, pid, _ = candidate
            layout[processor_path[pid][:closeness]].candidates.append(candidate)
        layout[()].tasks.extend(leftovers.tasks)
        return layout

    # B1: sheds that lose nothing: the room shares with the task all its processor did.
    root = sweep(
        positioned(root),
        lambda node, depth: shed(node, lambda c, d: c[0] == d and d > 0, depth),
    )
    second = positioned(root)

    # How many sheds must lose locality: those that a task with nothing to lose (a location
    # sharing nothing with its processor's) cannot make instead.
    nothing_to_lose: dict[str, int] = defaultdict(int)
    for closeness, _, pid, _ in second[()].candidates:
        if closeness == 0:
            nothing_to_lose[pid] += 1
    for pid, left in must_shed.items():
        lossy_forced[pid] = max(0, left - nothing_to_lose[pid])
    # A task with nothing to lose serves a forced shed of its processor first; the optional
    # sheds the rest of them can make are kept for them.
    free_reserved = {
        pid: min(left, max(0, nothing_to_lose[pid] - must_shed.get(pid, 0)))
        for pid, left in may_shed.items()
    }
    free_supply = sum(free_reserved.values())
    lossy_supply = max(0, supply_budget - free_supply)

    # B2: the sheds that must lose, nearest first (deepest common node with some room): first
    # non-local tasks (they lose a rack or a zone at most), then local ones (an exact location).
    def lossy_supply_placed(candidate: _Candidate) -> None:
        nonlocal lossy_supply
        if candidate[3] or not lossy_forced.get(candidate[2]):
            lossy_supply = max(0, lossy_supply - 1)

    def lossy(local_ones: bool) -> Callable[[_Candidate, int], bool | Route]:
        def wanted(candidate: _Candidate, depth: int) -> bool | Route:
            closeness, _, pid, is_local = candidate
            if closeness == 0 or is_local != local_ones:
                return False
            if lossy_forced.get(pid) and not is_local:
                return FORCED
            if lossy_supply and may_shed.get(pid, 0) > free_reserved.get(pid, 0):
                return OPTIONAL
            return False

        return wanted

    def lossy_pass(local_ones: bool) -> Callable[[_Node, int], None]:
        wanted = lossy(local_ones)

        def visit(node: _Node, depth: int) -> None:
            shed(node, wanted, depth, lossy_supply_placed)

        return visit

    for local_ones in (False, True):
        if any(lossy_forced.values()) or lossy_supply:
            root = sweep(second, lossy_pass(local_ones))
            second = positioned(root)
    root = sweep(second, lambda node, depth: None)

    # B3: what is left has nothing to lose: sheds first (forced ones, then optional), then the
    # tasks that must move, to whatever room remains.
    shed(root, lambda candidate, d: True, 0)
    fill(root.tasks, root.mandatory, None)
    optional_budget -= fill_level(root.tasks, root.optional, optional_budget)
    if root.tasks or root.mandatory or optional_budget or supply_budget or any(must_shed.values()):
        raise AssertionError(
            f"host-affinity left work undone: {len(root.tasks)} tasks, "
            f"{sum(s.free for s in root.mandatory)} slots, "
            f"budgets {optional_budget}/{supply_budget}"
        )

    result: dict[str, list[str]] = {}
    for pid in processors:
        mine = kept[pid]
        if given_up:
            mine = [name for name in mine if name not in given_up]
        result[pid] = mine + placed[pid]
    return result
