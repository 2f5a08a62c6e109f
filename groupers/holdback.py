"""Warm-up and the movement limit: the ``host-affinity`` phase that holds balance moves back
(issue 13 items 3 and 5; see :func:`groupers.host_affinity.assign` for the balanced answer).

A *balance move* is a task whose previous processor is live and whose processor changes. Tasks
of a processor that is gone (and new tasks) are never held back. A *caught-up copy* of a task on
processor p: ``task_state[task][p] <= acceptable_recovery_lag`` (the active's own processor always
counts as caught up). Rules, in this order:

1. **Warm-up** (``max_warmup_replicas`` > 0; :mod:`groupers.warmup`, four named steps). A move
   to a caught-up copy stands. The others are *pending*: the room each would fill on its
   target goes first to moves to caught-up copies (tasks of the pending sources, each task
   moving at most once, a maximum flow; issue 26: a move to a caught-up copy is taken before
   any warm-up is planned for that room), and a processor still below its lower bound takes a
   task with a caught-up copy on it from a processor above its own. The pending moves left stay
   where they are; the first ``max_warmup_replicas`` (spread order) get a *warm-up replica*, a
   standby on the target, and the rest wait. A later call, whose ``task_state`` shows the copy
   caught up, moves the task.

2. **Movement limit** (``max_moves_per_rebalance``). Of the remaining balance moves at most that
   many are made, dealt round-robin across targets (processors in id order, each target's tasks
   in spread order, so every target gets a share); the rest stay for the next rebalance, which
   starts from this answer and so converges to the balanced one.

Balance is off by the tasks held back, never more: each stays on its previous processor, and the
rooms they leave empty are no more than the pending moves that found no caught-up copy.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from groupers.api import GrouperMetadata
from groupers.warmup import Move, warm_up

__all__ = ["HoldBack", "hold_back"]


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
    lower: Mapping[str, int] | None = None,
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """The assignment with the moves held back, and the warm-up replicas (processor id -> task
    names). ``rank``: the spread order (None: name order); ``lower``: each processor's lower
    balance bound (None: 0), which the warm-up's top-up step fills from caught-up copies."""
    warmups: dict[str, list[str]] = {pid: [] for pid in assignment}
    owner = {name: pid for pid, names in assignment.items() for name in names}
    moves = _balance_moves(owner, metadata.previous_task_to_processor, assignment, rank)
    if not moves:
        return {pid: list(names) for pid, names in assignment.items()}, warmups
    if options.max_warmup_replicas:
        key = (lambda name: (rank[name], name)) if rank is not None else _by_name
        moves = warm_up(
            moves,
            owner,
            metadata,
            options.acceptable_recovery_lag,
            options.max_warmup_replicas,
            lower or {},
            key,
            warmups,
        )
    if options.max_moves_per_rebalance is not None:
        moves = _limited(moves, options.max_moves_per_rebalance, owner)
    result: dict[str, list[str]] = {pid: [] for pid in assignment}
    for name, pid in owner.items():
        result[pid].append(name)
    return result, warmups


def _by_name(name: str) -> tuple[int, str]:
    return 0, name


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
