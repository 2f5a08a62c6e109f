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
into optional room (the first by task name while the optional budget lasts). Every caught-up
copy is as good as another (lag is not ranked below the bound). With no ``task_state`` the phase
does nothing, so answers are those of before.
"""

from __future__ import annotations

from collections.abc import Mapping

from groupers.api import GrouperMetadata
from groupers.assignment import Assignment, Slots
from groupers.matching import max_flow_bipartite

__all__ = ["fail_over_to_copies"]


def fail_over_to_copies(
    state: Assignment, metadata: GrouperMetadata, acceptable_recovery_lag: int
) -> None:
    """Place orphans on live processors holding a caught-up copy, as room allows."""
    task_state = metadata.task_state
    if not task_state or not state.orphans:
        return
    edges: dict[str, dict[str, int]] = {}
    for name in state.orphans:
        copies = task_state.get(name)
        if copies:
            holders = _caught_up(copies, state.placed, acceptable_recovery_lag)
            if holders:
                edges[name] = dict.fromkeys(holders, 1)
    if not edges:
        return
    mandatory, optional = _room_by_processor(state)
    moved: set[str] = set()
    for room, is_optional in ((mandatory, False), (optional, True)):
        free = {pid: slot.free for pid, slot in room.items() if slot.free}
        if not free or (is_optional and state.optional_budget <= 0):
            continue
        usable = {
            name: {pid: 1 for pid in holders if pid in free}
            for name, holders in edges.items()
            if name not in moved
        }
        usable = {name: holders for name, holders in usable.items() if holders}
        flow = max_flow_bipartite(dict.fromkeys(usable, 1), free, usable)
        for name, pid in sorted(pair for pair, units in flow.items() if units):
            if is_optional and state.optional_budget <= 0:
                break
            _take(state, room[pid], is_optional)
            state.placed[pid].append(name)
            moved.add(name)
    if moved:
        _forget(state, moved)


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
