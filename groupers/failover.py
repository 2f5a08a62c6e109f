"""Failover to a caught-up copy: the ``host-affinity`` phase that runs between *keep* and the
locality phases (see :func:`groupers.host_affinity.assign`).

A task that must move because its processor is gone (an *orphan*: its previous processor is not
live, or it is new) goes first to a live processor holding a caught-up copy of its state:
``GrouperMetadata.task_state[task][processor] <= acceptable_recovery_lag``. Balance comes first:
the copy's processor takes it only into room the budgets of :func:`groupers.host_affinity.assign`
left it (room below its lower bound, else optional room while the optional budget lasts), so
the number of moves and the balance bounds are those of an assignment without copies.

As many orphans as possible go to a caught-up copy: a maximum bipartite matching of orphans to
the room of the processors holding their caught-up copies
(:func:`groupers.matching.max_flow_bipartite`), first into room below the lower bounds, then
into optional room while the optional budget lasts. Every caught-up copy is as good as another
(lag is not ranked below the bound).

The matching keeps the other priorities among equally good answers (issue 26):

- *spread*: orphans are served in spread order (:func:`groupers.spread.spread_order`), each
  taking the first holder with room, and when optional room was used too they are matched once
  more to the same counts, so a processor's share is one run of that order (a share of every
  stream; the locality phases, whose tasks may go to any processor of a place, deal them by
  stream instead: :meth:`groupers.assignment.Assignment.deal`);
- *locality*: an orphan tries the holders nearest its recorded location first (then by id);
- an orphan with a caught-up copy on **every** live processor is on a copy wherever it goes:
  the phase leaves it to the locality phases, so copies that single out no processor change
  nothing (the answer is the one without ``task_state``).

With no ``task_state`` the phase does nothing, so answers are those of before.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from groupers.api import GrouperMetadata
from groupers.assignment import Assignment
from groupers.locations import common_depth
from groupers.matching import max_flow_bipartite
from groupers.tree import Slots

__all__ = ["fail_over_to_copies"]


def fail_over_to_copies(
    state: Assignment, metadata: GrouperMetadata, acceptable_recovery_lag: int
) -> None:
    """Place orphans on live processors holding a caught-up copy, as room allows."""
    edges = _holders(state, metadata, acceptable_recovery_lag)
    if not edges:
        return
    mandatory, optional = _room_by_processor(state)
    matched: dict[str, str] = {}
    passes = 0
    for room, is_optional in ((mandatory, False), (optional, True)):
        free = {pid: slot.free for pid, slot in room.items() if slot.free}
        if not free or (is_optional and state.optional_budget <= 0):
            continue
        usable: dict[str, dict[str, int]] = {}
        for name, holders in edges.items():  # spread order
            if name not in matched:
                mine = {pid: 1 for pid in holders if pid in free}
                if mine:
                    usable[name] = mine
        flow = max_flow_bipartite(dict.fromkeys(usable, 1), free, usable, order=list(usable))
        pairs = {name: pid for (name, pid), units in flow.items() if units}
        passes += bool(pairs)
        for name in usable:  # spread order, so the optional budget goes to the first ones
            pid = pairs.get(name)
            if pid is None:
                continue
            if is_optional and state.optional_budget <= 0:
                break
            _take(state, room[pid], is_optional)
            matched[name] = pid
    if passes > 1:
        matched = _in_runs(matched, edges)
    for name in edges:  # spread order
        pid = matched.get(name)
        if pid is not None:
            state.placed[pid].append(name)
    if matched:
        _forget(state, set(matched))


def _in_runs(matched: dict[str, str], edges: dict[str, list[str]]) -> dict[str, str]:
    """The same number of orphans per processor, matched again in one pass, so that each
    processor's share is a run of the spread order (room below the lower bound, then optional
    room, would give it two)."""
    counts = Counter(matched.values())
    names = [name for name in edges if name in matched]  # spread order
    usable = {name: {pid: 1 for pid in edges[name] if pid in counts} for name in names}
    flow = max_flow_bipartite(dict.fromkeys(names, 1), counts, usable, order=names)
    again = {name: pid for (name, pid), units in flow.items() if units}
    return again if len(again) == len(matched) else matched


def _holders(
    state: Assignment, metadata: GrouperMetadata, acceptable_recovery_lag: int
) -> dict[str, list[str]]:
    """Orphan -> the live processors holding a caught-up copy, nearest its recorded location
    first (then by id); orphans in spread order. Orphans with no such copy, or with one on
    every live processor (nothing to choose), are left out."""
    task_state = metadata.task_state
    if not task_state or not state.orphans:
        return {}
    live = state.placed
    everywhere = len(live)
    edges: dict[str, list[str]] = {}
    for name in state.orphans:
        copies = task_state.get(name)
        if not copies:
            continue
        holders = _caught_up(copies, live, acceptable_recovery_lag)
        if holders and len(holders) < everywhere:
            where = state.path_of(metadata.task_locality.get(name))
            if where:
                path = state.processor_path
                holders.sort(key=lambda pid: -common_depth(path[pid], where))
            edges[name] = holders
    return edges


def _caught_up(
    copies: Mapping[str, int], live: Mapping[str, object], acceptable_recovery_lag: int
) -> list[str]:
    """The live processors holding a caught-up copy."""
    return sorted(
        pid for pid, lag in copies.items() if lag <= acceptable_recovery_lag and pid in live
    )


def _room_by_processor(state: Assignment) -> tuple[dict[str, Slots], dict[str, Slots]]:
    mandatory: dict[str, Slots] = {}
    optional: dict[str, Slots] = {}
    for node in state.nodes.values():
        for slot in node.mandatory:
            mandatory[slot.processor_id] = slot
        for slot in node.optional:
            optional[slot.processor_id] = slot
    return mandatory, optional


def _take(state: Assignment, slot: Slots | None, is_optional: bool) -> bool:
    """One place in ``slot`` (optional room also spends the optional budget)."""
    if slot is None or slot.free <= 0 or (is_optional and state.optional_budget <= 0):
        return False
    slot.free -= 1
    if is_optional:
        state.optional_budget -= 1
    return True


def _forget(state: Assignment, moved: set[str]) -> None:
    """The placed orphans leave the tree; slots with no room left go too."""
    for node in state.nodes.values():
        if node.tasks:
            node.tasks = [name for name in node.tasks if name not in moved]
        node.mandatory = [slot for slot in node.mandatory if slot.free]
        node.optional = [slot for slot in node.optional if slot.free]
    state.orphans = [name for name in state.orphans if name not in moved]
