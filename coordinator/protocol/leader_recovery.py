"""What a new leader does about the job-model data it cannot read (pure, no I/O).

A new leader reads the version pointer (``jobModelVersion``), the latest version and the model
in force (the newest whose barrier is DONE). Any of them can be corrupt: a chunk or manifest
that does not decode, a pointer that is garbage, empty while versions are stored, or that names
a version that does not exist. Stepping down cannot fix that (every replica would meet the same
data, and processors that restart run nothing meanwhile), so the leader recovers:

1. the adapter (:mod:`coordinator.leader.job_state`) looks for the model in force, newest first,
   asking :func:`next_to_read` which version to read next and skipping what it could not read;
   it reports each node it could not read (:class:`Unreadable`) with the newest model that
   read clean (``in_force``) and the highest version number stored (``version_floor``);
2. :func:`recovery` decides, by the first row of :data:`RECOVERY_RULES` that holds:

   ==================  ==============================================================
   recovery            when
   ==================  ==============================================================
   ``none``            everything it needed read clean
   ``older model``     an older DONE model reads clean: it is the model in force
   ``fresh model``     none does: no model is in force (the grouper starts from the
                       live processors and the task locality)
   ==================  ==============================================================

3. while a recovery is due (:class:`Repair`), the leader machine rebalances as soon as the
   debounce allows (trigger ``model in force unreadable``) and publishes the grouper's answer as
   a new version above every stored one, even when it equals the fallback model: the pointer
   must be rewritten and processors that cannot read their container must get one. That
   publish names no ``base`` (processors may run the unreadable version: every one reads its
   container) and may overwrite a corrupt pointer. The repair is over once such a version is
   published, or a version newer than everything unreadable (a rebalance the previous leader
   left in flight) comes into force.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from metadata.model import BarrierState, JobModel

__all__ = [
    "RECOVERY_RULES",
    "Recovery",
    "Repair",
    "Unreadable",
    "next_to_read",
    "recovery",
    "repair_for",
]


@dataclass(frozen=True)
class Unreadable:
    """A node of the job's models a new leader could not read: ``version`` None is the version
    pointer; ``problem`` says what is wrong with ``node``."""

    version: int | None
    node: str
    problem: str

    def describe(self) -> str:
        what = "the version pointer" if self.version is None else f"version {self.version}"
        return f"{what} unreadable ({self.node}: {self.problem})"


class Recovery(StrEnum):
    NONE = "none"
    OLDER = "older model"
    FRESH = "fresh model"


@dataclass(frozen=True)
class _Found:
    unreadable: bool  # something the leader needed could not be read
    fallback: bool  # an older model read clean


#: (recovery, condition) in order; the first condition that holds decides.
RECOVERY_RULES: tuple[tuple[Recovery, Callable[[_Found], bool]], ...] = (
    (Recovery.NONE, lambda f: not f.unreadable),
    (Recovery.OLDER, lambda f: f.fallback),
    (Recovery.FRESH, lambda f: True),
)


def recovery(unreadable: Collection[Unreadable], in_force: JobModel | None) -> Recovery:
    """How a new leader recovers from ``unreadable`` with ``in_force`` the newest model that
    read clean (:data:`RECOVERY_RULES`)."""
    found = _Found(unreadable=bool(unreadable), fallback=in_force is not None)
    return next(kind for kind, holds in RECOVERY_RULES if holds(found))


def next_to_read(
    states: Mapping[int, BarrierState | None], unreadable: Collection[int]
) -> int | None:
    """The version to read next looking for the model in force: the newest whose barrier is
    DONE and that is not known to be unreadable (None: no more candidates)."""
    done = [v for v, state in states.items() if state == BarrierState.DONE and v not in unreadable]
    return max(done) if done else None


@dataclass(frozen=True)
class Repair:
    """A recovery due: what was unreadable, how it recovers and what it falls back to. A
    version published ends it, and so does a version above ``above`` (the newest unreadable
    one) coming into force; a bad pointer (``above`` infinite) only a publish rewrites."""

    unreadable: tuple[Unreadable, ...]
    recovery: Recovery
    fallback: int | None  # the version of the model that read clean (None: a fresh model)
    above: float

    @property
    def note(self) -> str:
        """One line for the log, the rebalance history and ``affinity status``."""
        then = (
            f"fell back to version {self.fallback}"
            if self.fallback is not None
            else "no model reads clean: a fresh model from the live processors and task locality"
        )
        return "; ".join(u.describe() for u in self.unreadable) + f"; {then}"


def repair_for(unreadable: Sequence[Unreadable], in_force: JobModel | None) -> Repair | None:
    """The repair a new leader owes (None: nothing was unreadable)."""
    kind = recovery(unreadable, in_force)
    if kind is Recovery.NONE:
        return None
    versions = [u.version for u in unreadable]
    above = math.inf if None in versions else max(v for v in versions if v is not None)
    fallback = in_force.version if in_force is not None else None
    return Repair(tuple(unreadable), kind, fallback, above)
