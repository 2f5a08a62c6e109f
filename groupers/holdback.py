"""Warm-up and the movement limit: the ``host-affinity`` phase that holds balance moves back
(issue 13 items 3 and 5; see :func:`groupers.host_affinity.assign` for the balanced answer).

A *balance move* is a task whose previous processor is live and whose processor changes. Tasks
of a processor that is gone (and new tasks) are never held back. Rules, in this order:

1. **Warm-up** (``max_warmup_replicas`` > 0). A move to a processor with no caught-up copy of the
   task's state (``task_state[task][target] <= acceptable_recovery_lag``; the active's own
   processor always counts as caught up) is first *swapped*: another task of the same source,
   recorded at the same location, staying there, with a caught-up copy on the target, moves in
   its place (counts, moves and locality unchanged). Failing that the task stays where it is;
   the first ``max_warmup_replicas`` of those (in spread order) get a *warm-up replica*, a
   standby on the target, and the rest wait. A later call, whose ``task_state`` shows the
   target's copy caught up, moves the task (directly or by the swap).
2. **Movement limit** (``max_moves_per_rebalance``). Of the remaining balance moves at most that
   many are made, dealt round-robin across targets (processors in id order, each target's tasks
   in spread order, so every target gets a share); the rest stay for the next rebalance, which
   starts from this answer and so converges to the balanced one.

Balance is off by the tasks held back, never more: each stays on its previous processor.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from groupers.api import GrouperMetadata

__all__ = ["HoldBack", "hold_back"]


class Move(NamedTuple):
    """One balance move: a task leaves a live processor for another."""

    name: str
    source: str
    target: str


@dataclass(frozen=True)
class HoldBack:
    """The options of this phase (see the module docstring)."""

    max_warmup_replicas: int = 0
    acceptable_recovery_lag: int = 0
    max_moves_per_rebalance: int | None = None

    @property
    def active(self) -> bool:
        return bool(self.max_warmup_replicas) or self.max_moves_per_rebalance is not None


def hold_back(
    assignment: Mapping[str, list[str]],
    metadata: GrouperMetadata,
    options: HoldBack,
    rank: Mapping[str, int] | None = None,
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """The assignment with the moves held back, and the warm-up replicas (processor id -> task
    names). ``rank``: the spread order (None: name order)."""
    warmups: dict[str, list[str]] = {pid: [] for pid in assignment}
    owner = {name: pid for pid, names in assignment.items() for name in names}
    moves = _balance_moves(owner, metadata.previous_task_to_processor, assignment, rank)
    if not moves:
        return {pid: list(names) for pid, names in assignment.items()}, warmups
    if options.max_warmup_replicas:
        moves = _warm_up(moves, owner, metadata, options, warmups)
    if options.max_moves_per_rebalance is not None:
        moves = _limited(moves, options.max_moves_per_rebalance, owner)
    result: dict[str, list[str]] = {pid: [] for pid in assignment}
    for name, pid in owner.items():
        result[pid].append(name)
    return result, warmups


def _balance_moves(
    owner: Mapping[str, str],
    previous: Mapping[str, str],
    live: Mapping[str, object],
    rank: Mapping[str, int] | None,
) -> list[Move]:
    """The moves from a live processor, in spread order."""
    moves = [
        Move(name, source, pid)
        for name, pid in owner.items()
        if (source := previous.get(name)) is not None and source != pid and source in live
    ]
    moves.sort(key=(lambda m: (rank[m.name], m.name)) if rank is not None else None)
    return moves


def _is_caught_up(state: Mapping[str, Mapping[str, int]], name: str, pid: str, lag: int) -> bool:
    copies = state.get(name)
    return copies is not None and copies.get(pid, lag + 1) <= lag


def _warm_up(
    moves: list[Move],
    owner: dict[str, str],
    metadata: GrouperMetadata,
    options: HoldBack,
    warmups: dict[str, list[str]],
) -> list[Move]:
    """Rule 1: moves to a caught-up copy stand, others are swapped or held (``owner`` is
    updated); the warm-up replicas go into ``warmups``. Returns the moves made."""
    state, lag = metadata.task_state, options.acceptable_recovery_lag
    partners = _swap_partners(owner, metadata, lag)
    made: list[Move] = []
    waiting: list[Move] = []
    used: set[str] = set()
    for move in moves:
        if _is_caught_up(state, move.name, move.target, lag):
            made.append(move)
            continue
        partner = _take_partner(partners, move, metadata.task_locality, used)
        owner[move.name] = move.source
        if partner is None:
            waiting.append(move)
        else:
            owner[partner] = move.target
            made.append(Move(partner, move.source, move.target))
    for move in waiting[: options.max_warmup_replicas]:
        warmups[move.target].append(move.name)
    return made


def _swap_partners(
    owner: Mapping[str, str], metadata: GrouperMetadata, lag: int
) -> dict[tuple[str, str], list[str]]:
    """(source, target) -> tasks staying on their live previous processor ``source`` with a
    caught-up copy on ``target`` (name order)."""
    previous = metadata.previous_task_to_processor
    partners: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name in sorted(metadata.task_state):
        source = owner.get(name)
        if source is None or previous.get(name) != source:
            continue
        for pid, copy_lag in metadata.task_state[name].items():
            if pid != source and pid in metadata.processor_locality and copy_lag <= lag:
                partners[(source, pid)].append(name)
    return partners


def _take_partner(
    partners: Mapping[tuple[str, str], list[str]],
    move: Move,
    task_locality: Mapping[str, str],
    used: set[str],
) -> str | None:
    """A task that moves instead of ``move.name``: same source and recorded location, caught up
    on the target, not yet used (each task moves at most once)."""
    where = task_locality.get(move.name)
    for name in partners.get((move.source, move.target), ()):
        if name not in used and task_locality.get(name) == where:
            used.add(name)
            return name
    return None


def _limited(moves: list[Move], most: int, owner: dict[str, str]) -> list[Move]:
    """Rule 2: the first ``most`` moves dealt round-robin across targets; the others are undone
    in ``owner``."""
    if len(moves) <= most:
        return moves
    by_target: dict[str, list[Move]] = defaultdict(list)
    for move in moves:
        by_target[move.target].append(move)
    queues = [by_target[target] for target in sorted(by_target)]
    dealt: list[Move] = []
    for i in range(max(len(queue) for queue in queues)):
        dealt.extend(queue[i] for queue in queues if i < len(queue))
    for move in dealt[most:]:
        owner[move.name] = move.source
    return dealt[:most]
