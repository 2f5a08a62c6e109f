"""The conformance check of the replica options (DESIGN.md "Replicas and capacity"):
:func:`check_replica_options` asserts, on drawn inputs with ``processor_capacity``,
``task_state`` and tasks of several streams, the rules a grouper given those options promises,
as far as they can be seen from its answers:

- standby replicas: every task has ``min(standby_replicas, P - 1)`` copies, none on its active
  (warm-up replicas come on top);
- warm-up (``max_warmup_replicas`` > 0): a task leaving a live processor goes only to a
  processor with a caught-up copy (lag <= ``acceptable_recovery_lag``); without standby
  replicas, at most ``max_warmup_replicas`` tasks have a (warm-up) copy;
- ``max_moves_per_rebalance``: at most that many tasks leave a live processor;
- balance: with none of the above holding moves back, each processor has floor or ceil of
  ``T * cap(p) / sum(cap)`` tasks;
- the named scenarios of :mod:`groupers.testing.copies` (issue 26): caught-up copies on every
  processor cost no spread, and (with warm-up) a move to a caught-up copy is taken before a
  warm-up is planned for that room.

Validity and purity are :func:`groupers.testing.check_grouper`'s; run both.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from groupers.api import TaskNameGrouper, validate
from groupers.measures import balance_bounds
from groupers.testing.copies import check_caught_up_scenarios
from groupers.testing.strategies import GrouperInput, grouper_inputs
from metadata.model import ContainerModel

__all__ = ["check_replica_options"]


def check_replica_options(
    grouper: TaskNameGrouper,
    *,
    standby_replicas: int = 0,
    max_warmup_replicas: int = 0,
    acceptable_recovery_lag: int = 0,
    max_moves_per_rebalance: int | None = None,
    max_examples: int = 60,
    shrink: bool = True,
) -> None:
    """Assert the replica rules for ``grouper``, built with the options given here (with
    ``shrink``, a failure is reported on the smallest input hypothesis finds; slower)."""

    @settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        phases=tuple(Phase) if shrink else (Phase.explicit, Phase.reuse, Phase.generate),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.integers(1, 3).flatmap(lambda n: grouper_inputs(replicas=True, streams=n)))
    def rules_hold(data: GrouperInput) -> None:
        answer = grouper.group(data.tasks, data.metadata)
        validate(data.tasks, data.metadata, answer)
        _check_standbys(data, answer, standby_replicas, max_warmup_replicas)
        moves = _balance_moves(data, answer)
        if max_warmup_replicas:
            _check_warm_up(data, moves, acceptable_recovery_lag)
        if max_moves_per_rebalance is not None:
            assert len(moves) <= max_moves_per_rebalance, f"{len(moves)} tasks moved: {moves}"
        if not max_warmup_replicas and max_moves_per_rebalance is None:
            _check_capacity_balance(data, answer)

    rules_hold()
    check_caught_up_scenarios(
        grouper,
        standby_replicas=standby_replicas,
        max_warmup_replicas=max_warmup_replicas,
        acceptable_recovery_lag=acceptable_recovery_lag,
        max_moves_per_rebalance=max_moves_per_rebalance,
    )


def _owners(answer: set[ContainerModel]) -> dict[str, str]:
    return {name: c.processor_id for c in answer for name in c.tasks}


def _balance_moves(data: GrouperInput, answer: set[ContainerModel]) -> dict[str, str]:
    """Task -> its new processor, for tasks leaving a live processor."""
    live = data.metadata.processor_locality
    previous = data.metadata.previous_task_to_processor
    return {
        name: pid
        for name, pid in _owners(answer).items()
        if previous.get(name) in live and previous[name] != pid
    }


def _check_standbys(
    data: GrouperInput, answer: set[ContainerModel], replicas: int, warmups: int
) -> None:
    copies = Counter(name for c in answer for name in c.standby_tasks)
    wanted = min(replicas, len(data.metadata.processor_locality) - 1)
    for task in data.tasks:
        assert wanted <= copies[task.name] <= wanted + (1 if warmups else 0), (
            f"task {task.name!r} has {copies[task.name]} standby copies, expected {wanted}"
        )
    if not replicas:
        assert len(copies) <= warmups, f"{len(copies)} warm-up replicas, at most {warmups}"


def _check_warm_up(data: GrouperInput, moves: dict[str, str], lag: int) -> None:
    state = data.metadata.task_state
    for name, pid in moves.items():
        assert state.get(name, {}).get(pid, lag + 1) <= lag, (
            f"task {name!r} moved to {pid!r}, which has no caught-up copy"
        )


def _check_capacity_balance(data: GrouperInput, answer: set[ContainerModel]) -> None:
    md = data.metadata
    lower, upper = balance_bounds(sorted(md.processor_locality), len(data.tasks), md, 0)
    for c in answer:
        count = len(c.tasks)
        assert lower[c.processor_id] <= count <= upper[c.processor_id], (
            f"{c.processor_id!r} has {count} tasks, outside [{lower[c.processor_id]}, "
            f"{upper[c.processor_id]}] for its capacity"
        )
