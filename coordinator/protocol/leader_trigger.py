"""Why the leader rebalances: the trigger of a rebalance and how long it waited (pure, no I/O).

The leader machine (:mod:`coordinator.protocol.leader`) asks :func:`rebalance_cause` when it
starts the grouper, and carries the answer on
:class:`~coordinator.protocol.leader_events.RunGrouper` and
:class:`~coordinator.protocol.leader_events.PublishJobModel`; the adapter writes it into the
rebalance history. The first matching row of :data:`TRIGGER_RULES` wins:

=============================  ============================================================
trigger                        when
=============================  ============================================================
``model in force unreadable``  a new leader could not read the model in force or the version
                               pointer (:mod:`coordinator.protocol.leader_recovery`)
``barrier timed out``          the previous barrier timed out: this run is its retry
``first model``                no model is in force yet
``grace ended``                a vanished processor's grace period expired
``processors gone``            processors of the model in force vanished (and none is new)
``processors new``             processors appeared (and none of the model in force vanished)
``processors changed``         both at once
``assignment changed``         none of the above (e.g. the task set changed)
=============================  ============================================================

``probing`` and ``inherited`` are never chosen here: ``probing`` names the follow-up
rebalances the leader machine runs while the model in force is not the grouper's final answer
(:mod:`coordinator.protocol.leader_probing`), ``inherited`` names a rebalance a previous leader
published and this one saw through (the adapter knows no trigger or phases for it).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from metadata.model import JobModel

if TYPE_CHECKING:
    from coordinator.protocol.leader_recovery import Repair

__all__ = ["TRIGGER_RULES", "RebalanceCause", "Trigger", "rebalance_cause"]


class Trigger(StrEnum):
    UNREADABLE = "model in force unreadable"
    BARRIER_TIMED_OUT = "barrier timed out"
    FIRST_MODEL = "first model"
    GRACE_ENDED = "grace ended"
    PROCESSORS_GONE = "processors gone"
    PROCESSORS_NEW = "processors new"
    PROCESSORS_CHANGED = "processors changed"
    ASSIGNMENT_CHANGED = "assignment changed"
    PROBING = "probing"
    INHERITED = "inherited"


@dataclass(frozen=True)
class RebalanceCause:
    """Why a grouper run started (``trigger``), when (``started``, machine time), how long the
    job waited before it (``debounce_s``: from the first change, grace periods included) and,
    once answered, how long the grouper took (``grouper_s``)."""

    trigger: Trigger
    started: float
    debounce_s: float
    grouper_s: float | None = None
    note: str = ""  # more about it, in one line (what could not be read)

    def answered(self, now: float) -> RebalanceCause:
        return replace(self, grouper_s=max(0.0, now - self.started))


@dataclass(frozen=True)
class _Facts:
    unreadable: bool  # a new leader could not read the model in force or the pointer
    retry: bool  # the previous barrier timed out
    first: bool  # no model in force
    grace_ended: bool  # a vanished processor's grace expired
    gone: bool  # processors of the model in force are not live
    new: bool  # live processors the model in force does not name


#: (trigger, condition) in order of priority; the first condition that holds names the trigger.
TRIGGER_RULES: tuple[tuple[Trigger, Callable[[_Facts], bool]], ...] = (
    (Trigger.UNREADABLE, lambda f: f.unreadable),
    (Trigger.BARRIER_TIMED_OUT, lambda f: f.retry),
    (Trigger.FIRST_MODEL, lambda f: f.first),
    (Trigger.GRACE_ENDED, lambda f: f.grace_ended),
    (Trigger.PROCESSORS_CHANGED, lambda f: f.gone and f.new),
    (Trigger.PROCESSORS_GONE, lambda f: f.gone),
    (Trigger.PROCESSORS_NEW, lambda f: f.new),
    (Trigger.ASSIGNMENT_CHANGED, lambda f: True),
)


class _Settings(Protocol):
    """What :func:`rebalance_cause` reads of the job's settings (a
    :class:`~coordinator.protocol.leader_events.CoordinatorSettings`, which is not imported:
    ``leader_events`` imports this module for :class:`Trigger`)."""

    @property
    def processor_grace_s(self) -> float: ...


class _Job(Protocol):
    """What :func:`rebalance_cause` reads of the leader machine."""

    in_force: JobModel | None
    processors: dict[str, str]
    dirty_since: float | None
    retry: bool
    repair: Repair | None

    @property
    def settings(self) -> _Settings: ...


def rebalance_cause(now: float, job: _Job, vanished_since: Collection[float]) -> RebalanceCause:
    """The cause of a grouper run of ``job`` (the leader machine) starting at ``now``: its model
    in force, live processors, first change waited for (``dirty_since``), whether the previous
    barrier timed out (``retry``), and ``vanished_since``: since when each vanished processor of
    the model in force is gone (its grace period ends ``processor_grace_s`` later)."""
    in_force = job.in_force.containers if job.in_force is not None else None
    grace = job.settings.processor_grace_s
    facts = _Facts(
        unreadable=job.repair is not None,
        retry=job.retry,
        first=in_force is None,
        grace_ended=grace > 0 and any(since + grace <= now for since in vanished_since),
        gone=in_force is not None and bool(set(in_force) - set(job.processors)),
        new=in_force is not None and bool(set(job.processors) - set(in_force)),
    )
    trigger = next(t for t, holds in TRIGGER_RULES if holds(facts))
    since = job.dirty_since
    waited = 0.0 if job.retry or since is None else max(0.0, now - since)
    note = job.repair.note if trigger is Trigger.UNREADABLE and job.repair is not None else ""
    return RebalanceCause(trigger, now, waited, note=note)
