"""The leader machine's policies (:mod:`coordinator.protocol.leader`), as pure functions and one
small ledger. No I/O, no clock: times are passed in.

- :func:`check_answer`: is a grouper's answer a valid assignment? Any exception while checking
  it (``validate()`` itself raising, an ``__iter__`` that raises, an unhashable processor id)
  makes it an invalid answer, never a crash (invariant I5).
- :func:`drops_every_task`: would a model take away every task of the model in force? The
  machine refuses such a model unless ``allow_dropping_all_tasks`` is set.
- :func:`debounce_due` and :func:`grace_until`: when a dirty job is rebalanced.
- :class:`Bench`: processors that missed a barrier. A live processor that a barrier expected and
  that did not join it before the barrier timed out (while at least one other processor did) is
  *benched*: left out of the next models for ``exclusion_s`` (doubled at each repeated miss,
  at most 8 times), so the job does not time out at every rebalance because of it. It is let
  back in when its cool-down ends, or at once when it registers again (its registration ended
  or its location changed); a barrier it joins clears its misses.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from coordinator.protocol.leader_events import PublishJobModel
from coordinator.protocol.rules import gaining_processors, losing_processors
from groupers import GrouperMetadata, InvalidAssignment, validate
from groupers.measures import tasks_kept_local, tasks_moved, tasks_with_locality
from metadata.model import ContainerModel, JobModel, TaskModel

__all__ = [
    "PendingBarrier",
    "note_vanished",
    "task_locations",
    "Bench",
    "BadAnswer",
    "Vanished",
    "check_answer",
    "debounce_due",
    "drop_all_reason",
    "drops_every_task",
    "grace_until",
    "grouper_metadata",
    "publish_action",
]

#: A repeated miss doubles the cool-down, up to this factor.
MAX_EXCLUSION_FACTOR = 8


class BadAnswer(ValueError):
    """The grouper's answer is not a valid assignment; the message says why."""


def check_answer(
    tasks: Collection[TaskModel], metadata: GrouperMetadata, answer: object
) -> dict[str, ContainerModel]:
    """The containers of ``answer`` by processor id, once :func:`groupers.validate` accepts it.

    Raises :class:`BadAnswer` for an invalid answer and for any exception raised while checking
    it, naming the exception (so a broken answer never takes the coordinator down)."""
    try:
        validate(tasks, metadata, answer)
        assert isinstance(answer, Collection)
        containers: dict[str, ContainerModel] = {c.processor_id: c for c in answer}
        hash(frozenset(containers.values()))  # the model must be hashable (FrozenMap)
    except Exception as exc:  # any failure is an invalid answer (I5)
        if isinstance(exc, InvalidAssignment):
            raise BadAnswer(str(exc)) from None
        raise BadAnswer(f"checking the answer raised {type(exc).__name__}: {exc}") from None
    return containers


def drops_every_task(in_force: JobModel | None, candidate: JobModel) -> bool:
    """True when the model in force runs tasks and ``candidate`` keeps none of them."""
    if in_force is None or not in_force.tasks:
        return False
    return not any(name in candidate.tasks for name in in_force.tasks)


def drop_all_reason(in_force: JobModel, candidate: JobModel) -> str:
    return (
        f"the new model would stop every task of the model in force (version {in_force.version}:"
        f" {len(in_force.tasks)} tasks; the new model has {len(candidate.tasks)}, none of them);"
        " set coordinator.allow_dropping_all_tasks: true to allow it"
    )


def grouper_metadata(
    in_force: JobModel | None,
    processors: Mapping[str, str],
    task_locality: Mapping[str, str],
    capacity: Mapping[str, int] | None = None,
) -> GrouperMetadata:
    """What the grouper is given: the processors a model may name (with their capacity), the
    recorded locality and the assignment of the model in force."""
    capacity = capacity or {}
    return GrouperMetadata(
        processor_locality=dict(processors),
        processor_capacity={pid: capacity[pid] for pid in processors if pid in capacity},
        task_locality=dict(task_locality),
        previous_task_to_processor=in_force.task_to_processor() if in_force else {},
        previous_task_to_ssps=(
            {name: task.partitions for name, task in in_force.tasks.items()} if in_force else {}
        ),
    )


def publish_action(
    candidate: JobModel,
    in_force: JobModel | None,
    metadata: GrouperMetadata,
    processors: Mapping[str, str],
    recorded: Mapping[str, str],
) -> PublishJobModel:
    """Publish ``candidate``, planned against ``in_force`` (its ``base``, ``losing`` and
    ``gaining``), with the measures the service logs (moved, kept local)."""
    owner = candidate.task_to_processor()
    return PublishJobModel(
        candidate,
        frozenset(candidate.containers),
        base=in_force.version if in_force else None,
        losing=losing_processors(in_force, candidate) if in_force else frozenset(),
        moved=tasks_moved(metadata.previous_task_to_processor, owner),
        locality_kept=tasks_kept_local(owner, processors, recorded),
        with_locality=tasks_with_locality(owner, recorded),
        gaining=gaining_processors(in_force, candidate) if in_force else None,
    )


def debounce_due(
    dirty_since: float | None, last_change: float | None, debounce_s: float, debounce_max_s: float
) -> float | None:
    """When a dirty job should be rebalanced (None: it is not dirty): after ``debounce_s`` of
    quiet, but never later than ``debounce_max_s`` after the first change (SAMZA-2633)."""
    if dirty_since is None or last_change is None:
        return None
    return min(last_change + debounce_s, dirty_since + max(debounce_max_s, debounce_s))


@dataclass
class Vanished:
    """A processor of the model in force that is gone: where it was, and since when."""

    location: str | None
    since: float


def note_vanished(
    vanished: dict[str, Vanished],
    in_force: JobModel | None,
    processors: Mapping[str, str],
    now: float,
) -> None:
    """Track the processors of the model in force that are gone (for the grace period)."""
    owners = in_force.containers if in_force else {}
    for pid, container in owners.items():
        if pid in processors:
            vanished.pop(pid, None)
        elif pid not in vanished and container.tasks:
            vanished[pid] = Vanished(container.location_id, now)
    for pid in list(vanished):
        if pid not in owners:
            del vanished[pid]


@dataclass
class PendingBarrier:
    """The published version waiting for its barrier: who it expects and who joined, and its
    deadline (infinite until the publish completed)."""

    model: JobModel
    expected: frozenset[str]
    deadline: float
    published_at: float
    joined: frozenset[str] = frozenset()
    #: what the grouper was given for this answer, to ask once it is in force whether it is the
    #: grouper's fixed point (coordinator.protocol.leader_probing); None: unknown (a barrier
    #: inherited from the previous leader), so it probes once
    metadata: GrouperMetadata | None = None


def task_locations(model: JobModel) -> dict[str, str]:
    """Task -> the location of the processor ``model`` gives it (what the processors write as
    their tasks' locality once the barrier is DONE, I4)."""
    return {
        name: container.location_id
        for container in model.containers.values()
        if container.location_id
        for name in container.tasks
    }


def grace_until(
    vanished: Mapping[str, Vanished],
    processors: Mapping[str, str],
    known: Collection[str],
    grace_s: float,
    now: float,
) -> float | None:
    """Until when vanished processors' tasks wait (None: nobody is waited for). A new processor
    (not in ``known``) at a vanished one's location ends the wait for it."""
    if grace_s <= 0 or not vanished:
        return None
    new_locations = {loc for pid, loc in processors.items() if pid not in known}
    waits = [
        v.since + grace_s
        for v in vanished.values()
        if v.since + grace_s > now and v.location not in new_locations
    ]
    return max(waits) if waits else None


@dataclass
class Bench:
    """Processors left out of the next models because they missed a barrier (module docstring)."""

    exclusion_s: float
    until: dict[str, float] = field(default_factory=dict)  # benched processor -> cool-down end
    misses: dict[str, int] = field(default_factory=dict)  # consecutive missed barriers
    locations: dict[str, str] = field(default_factory=dict)  # where it was registered

    def missed(
        self, missing: Iterable[str], processors: Mapping[str, str], now: float
    ) -> dict[str, tuple[int, float]]:
        """Bench the live processors of ``missing``; returns processor -> (misses, until)."""
        benched: dict[str, tuple[int, float]] = {}
        for pid in sorted(missing):
            if pid not in processors or self.exclusion_s <= 0:
                continue
            misses = self.misses.get(pid, 0) + 1
            factor = min(2 ** (misses - 1), MAX_EXCLUSION_FACTOR)
            self.misses[pid] = misses
            self.until[pid] = now + self.exclusion_s * factor
            self.locations[pid] = processors[pid]
            benched[pid] = (misses, self.until[pid])
        return benched

    def joined(self, participants: Iterable[str]) -> None:
        """Processors that joined a barrier: their misses are forgotten."""
        for pid in participants:
            self.misses.pop(pid, None)

    def release(self, processors: Mapping[str, str], now: float) -> dict[str, str]:
        """Let back in whoever's cool-down ended or who registered again; returns processor ->
        why. A processor that is gone for good is forgotten silently."""
        released: dict[str, str] = {}
        for pid, until in sorted(self.until.items()):
            if pid not in processors:
                released[pid] = "its registration ended; it is admitted when it registers again"
            elif processors[pid] != self.locations.get(pid):
                released[pid] = "it registered again"
            elif now >= until:
                released[pid] = "its cool-down ended"
        for pid in released:
            del self.until[pid]
            self.locations.pop(pid, None)
        for pid in [p for p in self.misses if p not in processors and p not in self.until]:
            del self.misses[pid]
        return released

    def eligible(self, processors: Mapping[str, str]) -> dict[str, str]:
        """The live processors a model may name: everyone not benched."""
        return {pid: loc for pid, loc in processors.items() if pid not in self.until}

    def next_release(self) -> float | None:
        return min(self.until.values()) if self.until else None

    def clear(self) -> None:
        self.until.clear()
        self.misses.clear()
        self.locations.clear()
