"""Warm-up before a move: rule 1 of :mod:`groupers.holdback`, in its four named steps.

:func:`warm_up` takes the balance moves (tasks leaving a live processor, in spread order) and
decides which are made now, which wait for a warm-up replica, and which tasks move instead:

a. *free moves*: a move to a caught-up copy stands;
b. :func:`_refill`: the rest are *pending*. Each leaves room on its target and a surplus on its
   source; a maximum flow (:func:`groupers.matching.max_flow`, network ``sources -> their tasks
   with a caught-up copy on a target with room -> targets``) fills as much of that room as
   possible with moves to caught-up copies. A source gives at most its surplus (counts stay
   those of the balanced answer), each task moves at most once, and tasks are tried in spread
   order (then targets by id), so a target's share is a run of that order;
c. :func:`_top_up`: a processor still below its lower bound takes tasks with a caught-up copy on
   it from processors above theirs, in spread order;
d. :func:`_hold`: pending moves that were not made stay; every room still empty is paired with a
   held task of a source still over its share (its own target first); the first
   ``max_warmup_replicas`` pairs in spread order get a warm-up replica on the target.

Pure: no I/O.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from typing import NamedTuple

from groupers.api import GrouperMetadata
from groupers.matching import max_flow

__all__ = ["Move", "is_caught_up", "warm_up"]


class Move(NamedTuple):
    """One balance move: a task leaves a live processor for another."""

    name: str
    source: str
    target: str


def is_caught_up(state: Mapping[str, Mapping[str, int]], name: str, pid: str, lag: int) -> bool:
    """``pid`` holds a copy of the task within ``lag``."""
    copies = state.get(name)
    return copies is not None and copies.get(pid, lag + 1) <= lag


Key = Callable[[str], tuple[int, str]]  # a task's place in the spread order
Node = tuple[str, str]  # ("from", processor), ("task", name), ("to", processor), or an end


def warm_up(
    moves: list[Move],
    owner: dict[str, str],
    metadata: GrouperMetadata,
    lag: int,
    most: int,
    lower: Mapping[str, int],
    key: Key,
    warmups: dict[str, list[str]],
) -> list[Move]:
    """Steps a to d: update ``owner``, add the warm-up replicas to ``warmups`` (processor ->
    tasks); return the moves made."""
    state = metadata.task_state
    free: list[Move] = []
    pending: list[Move] = []
    for move in moves:
        (free if is_caught_up(state, move.name, move.target, lag) else pending).append(move)
    if not pending:
        return free
    for move in pending:
        owner[move.name] = move.source  # held unless a step below moves it
    offers = _offers(owner, metadata, lag, {move.target for move in pending}, key)
    refilled = _refill(pending, owner, offers)
    topped = _top_up(owner, metadata, lower, offers)
    _hold(pending, refilled + topped, owner, state, lag, most, key, warmups)
    return sorted(free + refilled + topped, key=lambda move: key(move.name))


Offer = tuple[str, str, list[str]]  # task, the processor it stays on, targets with its copy


def _offers(
    owner: Mapping[str, str],
    metadata: GrouperMetadata,
    lag: int,
    targets: set[str],
    key: Key,
) -> list[Offer]:
    """The tasks staying on their live previous processor with a caught-up copy on some of
    ``targets`` (the processors pending moves leave room on; ids sorted), in spread order: one
    pass over ``task_state``."""
    previous = metadata.previous_task_to_processor
    offers: list[Offer] = []
    for name, copies in metadata.task_state.items():
        there = [pid for pid, copy_lag in copies.items() if pid in targets and copy_lag <= lag]
        if not there:
            continue
        here = owner.get(name)
        if here is None or previous.get(name) != here:
            continue  # new, or moved already
        there = sorted(pid for pid in there if pid != here)
        if there:
            offers.append((name, here, there))
    offers.sort(key=lambda offer: key(offer[0]))
    return offers


# ------------------------------------------------------------------------ b. refill


def _refill(pending: list[Move], owner: dict[str, str], offers: list[Offer]) -> list[Move]:
    """Fill the pending moves' room with moves to caught-up copies (a maximum flow)."""
    surplus = Counter(move.source for move in pending)
    room = Counter(move.target for move in pending)
    source, sink = ("source", ""), ("sink", "")
    arcs: list[tuple[Node, Node, int]] = [
        (source, ("from", pid), surplus[pid]) for pid in sorted(surplus)
    ]
    origin: dict[str, str] = {}
    for name, here, there in offers:  # spread order: the first tasks are tried first
        if here in surplus:
            origin[name] = here
            arcs.append((("from", here), ("task", name), 1))
            arcs.extend((("task", name), ("to", pid), 1) for pid in there)
    if not origin:
        return []
    arcs.extend((("to", pid), sink, room[pid]) for pid in sorted(room))
    made: list[Move] = []
    for (tail, head), units in max_flow(arcs, source, sink).items():
        if units and tail[0] == "task" and head[0] == "to":
            name, target = tail[1], head[1]
            made.append(Move(name, origin[name], target))
            owner[name] = target
    return made


# ------------------------------------------------------------------------ c. top-up


def _top_up(
    owner: dict[str, str],
    metadata: GrouperMetadata,
    lower: Mapping[str, int],
    offers: list[Offer],
) -> list[Move]:
    """A processor below its lower bound takes tasks with a caught-up copy on it from processors
    above theirs (tasks still on their previous processor, in spread order)."""
    counts = Counter(owner.values())
    short = {pid for pid in metadata.processor_locality if counts[pid] < lower.get(pid, 0)}
    if not short:
        return []
    by_target: dict[str, list[str]] = defaultdict(list)
    for name, here, there in offers:
        for pid in there:
            if pid in short and owner[name] == here:  # not moved by the refill
                by_target[pid].append(name)
    previous = metadata.previous_task_to_processor
    made: list[Move] = []
    for target in sorted(short):
        for name in by_target[target]:
            if counts[target] >= lower[target]:
                break
            here = owner[name]
            if here != previous.get(name):
                continue  # moved already (to another processor below its bound)
            if counts[here] <= lower.get(here, 0):
                continue  # its processor cannot spare it
            owner[name] = target
            counts[here] -= 1
            counts[target] += 1
            made.append(Move(name, here, target))
    return made


# ------------------------------------------------------------------------ d. hold


def _hold(
    pending: list[Move],
    made: list[Move],
    owner: Mapping[str, str],
    state: Mapping[str, Mapping[str, int]],
    lag: int,
    most: int,
    key: Key,
    warmups: dict[str, list[str]],
) -> None:
    """Pair each room still empty with a held task of a source still over its share (its own
    target first); the first ``most`` pairs in spread order get a warm-up replica."""
    empty = Counter(move.target for move in pending)
    over = Counter(move.source for move in pending)
    for move in made:  # a source gives its surplus first
        empty[move.target] -= 1
        over[move.source] -= 1
    held = [move for move in pending if owner[move.name] == move.source]
    pairs: list[tuple[str, str]] = []
    paired: set[str] = set()

    def pair(move: Move, target: str) -> None:
        empty[target] -= 1
        over[move.source] -= 1
        pairs.append((move.name, target))
        paired.add(move.name)

    for move in held:  # spread order, each to its own target first
        if empty[move.target] > 0 and over[move.source] > 0:
            pair(move, move.target)
    rest = [move for move in held if move.name not in paired]
    for target in sorted(pid for pid, left in empty.items() if left > 0):
        for move in rest:  # then any held task of a source still over its share
            if empty[target] <= 0:
                break
            if over[move.source] > 0 and not is_caught_up(state, move.name, target, lag):
                pair(move, target)
        rest = [move for move in rest if move.name not in paired]
    pairs.sort(key=lambda item: key(item[0]))
    for name, target in pairs[:most]:
        warmups[target].append(name)
