"""The location tree of one ``host-affinity`` assignment: what sits on its nodes, the shed
predicates, and the sweep that visits it (see :mod:`groupers.assignment` for the state and its
moves).

Every node (a location path: ``zone/rack/host``, a flat id, or the root ``()``) holds the
unmatched items recorded there: tasks that must move, room on processors (:class:`Slots`,
mandatory below the lower bound, optional up to the upper), and tasks a processor may or must
give up (:class:`Candidate`). :func:`sweep` visits the nodes deepest first and passes what is
left up to the parent; a shed predicate (:data:`Wanted`) says which candidates a node's room
takes.

Pure: no I/O.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from enum import Enum
from typing import NamedTuple

from groupers.locations import Path

__all__ = [
    "Candidate",
    "Node",
    "Route",
    "Slots",
    "Wanted",
    "anything",
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
