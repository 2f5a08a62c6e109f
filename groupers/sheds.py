"""Which tasks a ``host-affinity`` processor gives up, phase by phase (see
:func:`groupers.host_affinity.assign`).

- :func:`forced_sheds_matched` (phase 3): forced sheds placed at their tasks' exact locations,
  as a max flow (:func:`groupers.matching.max_flow_bipartite`);
- :class:`ZeroLossLocal` (phase 4): optional sheds of local tasks to another processor at the
  same location;
- :class:`LossySheds` (phase 5, pass B2): the sheds that cannot avoid losing locality.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from groupers.assignment import Assignment
from groupers.locations import Path
from groupers.matching import max_flow_bipartite
from groupers.tree import Candidate, Node, Route

__all__ = ["LossySheds", "ZeroLossLocal", "forced_sheds_matched", "forced_room"]


# ------------------------------------------------------------------------ forced sheds (phase 3)


def forced_sheds_matched(state: Assignment) -> None:
    """Most forced sheds placed at their tasks' exact locations: a max flow from processors
    (supply: sheds still due) through candidates to locations (room: free slots)."""
    room = forced_room(state.nodes, bool(state.optional_budget))
    edges: dict[str, dict[Path, int]] = defaultdict(dict)
    for path in room:
        for candidate in state.nodes[path].candidates:
            if _may_force_here(state, candidate, path):
                pid = candidate.processor_id
                edges[pid][path] = edges[pid].get(path, 0) + 1
    if not edges:
        return
    flow = max_flow_bipartite(state.must_shed, room, edges)
    # Giving up candidates at one node never changes which of another owner's are chosen, so
    # each node's candidates are grouped once and the given-up ones removed at the end.
    by_owner: dict[Path, dict[str, list[Candidate]]] = {}
    taken: set[Candidate] = set()
    for (owner, path), share in sorted(flow.items()):
        if share > 0:
            node = state.nodes[path]
            if path not in by_owner:
                by_owner[path] = _non_local_by_owner(node)
            _shed_share(state, node, by_owner[path].get(owner, []), share, taken)
    for path in by_owner:
        node = state.nodes[path]
        node.candidates = [c for c in node.candidates if c not in taken]


def _may_force_here(state: Assignment, candidate: Candidate, path: Path) -> bool:
    """A forced shed of this candidate into room at ``path`` would gain its exact location."""
    return (
        not candidate.is_local
        and candidate.closeness < len(path)
        and state.is_over_quota(candidate.processor_id)
    )


def _non_local_by_owner(node: Node) -> dict[str, list[Candidate]]:
    """The node's non-local candidates per processor, in shed order."""
    grouped: dict[str, list[Candidate]] = defaultdict(list)
    for candidate in node.candidates:
        if not candidate.is_local:
            grouped[candidate.processor_id].append(candidate)
    for mine in grouped.values():
        mine.sort(key=Candidate.shed_order)
    return grouped


def _shed_share(
    state: Assignment, node: Node, chosen: list[Candidate], share: int, taken: set[Candidate]
) -> None:
    """The first ``share`` of ``chosen`` (one processor's candidates here) are given up."""
    for candidate in chosen[:share]:
        if state.place_one(candidate.name, node, True):
            state.must_shed[candidate.processor_id] -= 1
            state.given_up.add(candidate.name)
            taken.add(candidate)


def forced_room(nodes: Mapping[Path, Node], optional_too: bool) -> dict[Path, int]:
    """Free room per (non-root) location, mandatory and (with ``optional_too``) optional."""
    room: dict[Path, int] = {}
    for path, node in nodes.items():
        if not path:
            continue
        free = sum(s.free for s in node.mandatory)
        if optional_too:
            free += sum(s.free for s in node.optional)
        if free:
            room[path] = free
    return room


# ------------------------------------------------------------------------ optional sheds (phase 4)


@dataclass
class ZeroLossLocal:
    """Optional sheds are made whatever happens; those that non-local tasks cannot make cost an
    exact location unless a local task moves to another processor at its own location."""

    state: Assignment
    reserved: dict[str, int]  # optional sheds each processor's non-local tasks can make
    shortfall: int  # optional sheds the non-local tasks cannot make

    def wanted(self, candidate: Candidate, depth: int) -> Route:
        pid = candidate.processor_id
        if (
            candidate.is_local
            and candidate.closeness == depth
            and self.shortfall > 0
            and self.state.may_shed.get(pid, 0) > self.reserved.get(pid, 0)
        ):
            return Route.OPTIONAL
        return Route.KEEP

    def made(self, candidate: Candidate) -> None:
        self.shortfall -= 1

    def visit(self, node: Node, depth: int) -> None:
        self.state.shed(node, self.wanted, depth, self.made)


# ------------------------------------------------------------------------ lossy sheds (phase 5)


@dataclass
class LossySheds:
    """Pass B2: the sheds that cannot avoid losing locality."""

    state: Assignment
    free_reserved: dict[str, int]  # optional sheds kept for tasks with nothing to lose
    supply: int  # optional sheds that must lose locality, still to make
    local_ones: bool = False  # this round sheds local candidates (else non-local ones)

    @classmethod
    def count(cls, state: Assignment, root: Node) -> LossySheds:
        """How many sheds must lose locality: those that a task with nothing to lose (a
        location sharing nothing with its processor's) cannot make instead. Such a task serves
        a forced shed of its processor first; the optional sheds the rest can make are kept."""
        nothing_to_lose: dict[str, int] = defaultdict(int)
        for candidate in root.candidates:
            if candidate.closeness == 0:
                nothing_to_lose[candidate.processor_id] += 1
        for pid, left in state.must_shed.items():
            state.lossy_forced[pid] = max(0, left - nothing_to_lose[pid])
        free_reserved = {
            pid: min(left, max(0, nothing_to_lose[pid] - state.must_shed.get(pid, 0)))
            for pid, left in state.may_shed.items()
        }
        return cls(state, free_reserved, max(0, state.supply_budget - sum(free_reserved.values())))

    def wanted(self, candidate: Candidate, depth: int) -> Route:
        if candidate.closeness == 0 or candidate.is_local != self.local_ones:
            return Route.KEEP
        pid = candidate.processor_id
        if self.state.lossy_forced.get(pid) and not candidate.is_local:
            return Route.FORCED
        if self.supply and self.state.may_shed.get(pid, 0) > self.free_reserved.get(pid, 0):
            return Route.OPTIONAL
        return Route.KEEP

    def made(self, candidate: Candidate) -> None:
        if candidate.is_local or not self.state.lossy_forced.get(candidate.processor_id):
            self.supply = max(0, self.supply - 1)

    def visit(self, node: Node, depth: int) -> None:
        self.state.shed(node, self.wanted, depth, self.made)
