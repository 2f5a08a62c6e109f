"""What ``affinity repair`` does with each unusable node it finds (pure, no I/O).

The coordinator reads past corrupt data (a new leader falls back from a model in force it cannot
read and publishes a clean version: :mod:`coordinator.protocol.leader_recovery`; corrupt barrier
states and locality entries read as missing). What it reads past stays in ZooKeeper until
retention removes it, or for ever (a locality entry, a history entry), and tools that read it
(``jobmodel show``, ``status``) keep failing on it. ``affinity repair`` finds those nodes
(:mod:`coordinator.status.damage`) and :func:`plan_repair` decides, by the first row of
:data:`REPAIR_RULES` that holds, whether a node is removed (``--apply``) or left, and why:

=================  =============================  ==============================================
what               when                           step
=================  =============================  ==============================================
version pointer    always                         left: only a leader's publish may rewrite it
job-model version  the pointer is unusable        left: repair again after a leader's publish
job-model version  the pointer names it           left: a leader publishes a clean one above it
job-model version  older                          removed (with its barrier): no reader uses it
barrier state      the pointer is unusable        left: repair again after a leader's publish
barrier state      of the version the pointer     left: the next version supersedes it
                   names
barrier state      of an older version            removed (the barrier)
locality entry     always                         removed: that task has no recorded location
                                                  until its processor runs it again
locality marker    always                         left: set it by hand (removing it removes
                                                  every entry)
history entry      always                         removed: a record only
checkpoint         always                         left: it holds input offsets; fix it by hand
=================  =============================  ==============================================

A node left by a leader's fallback says what a leader would fall back to (the same rule the
leader follows: :func:`~coordinator.protocol.leader_recovery.next_to_read`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum

from coordinator.protocol.leader_recovery import next_to_read
from metadata.model import BarrierState

__all__ = ["REPAIR_RULES", "Finding", "Kind", "Step", "plan_repair"]


class Kind(StrEnum):
    POINTER = "version pointer"
    VERSION = "job-model version"
    BARRIER = "barrier state"
    LOCALITY = "locality entry"
    MARKER = "locality run marker"
    HISTORY = "history entry"
    CHECKPOINT = "checkpoint"


@dataclass(frozen=True)
class Finding:
    """An unusable node: ``node`` is what a repair removes (a version's folder, a barrier),
    ``unreadable`` the node that failed to read (a chunk), ``zversion`` and
    ``unreadable_zversion`` their znode versions when they were read (a removal is conditional
    on both: a chunk rewritten meanwhile, readable now, keeps its version)."""

    kind: Kind
    node: str
    problem: str
    zversion: int = -1
    version: int | None = None  # the job-model version it belongs to
    unreadable: str = ""
    unreadable_zversion: int = -1


@dataclass(frozen=True)
class Step:
    finding: Finding
    remove: bool
    why: str


@dataclass(frozen=True)
class _Facts:
    kind: Kind
    named: bool  # it belongs to the version the pointer names
    pointer_bad: bool  # the pointer is unusable: which version is the latest is unknown


_AFTER_LEADER = "the version pointer is unusable: run repair again once a leader has published"


#: (kind, condition, remove?, why) in order: the first row whose kind and condition hold.
REPAIR_RULES: tuple[tuple[Kind, Callable[[_Facts], bool], bool, str], ...] = (
    (Kind.POINTER, lambda f: True, False, "only a leader's publish may rewrite it: {leader}"),
    (Kind.VERSION, lambda f: f.pointer_bad, False, _AFTER_LEADER),
    (Kind.VERSION, lambda f: f.named, False, "the pointer names it: {leader}"),
    (Kind.VERSION, lambda f: True, True, "no reader uses it (it goes with its barrier)"),
    (Kind.BARRIER, lambda f: f.pointer_bad, False, _AFTER_LEADER),
    (
        Kind.BARRIER,
        lambda f: f.named,
        False,
        "the latest version's: the next version supersedes it",
    ),
    (Kind.BARRIER, lambda f: True, True, "an older version's barrier: nobody waits on it"),
    (
        Kind.LOCALITY,
        lambda f: True,
        True,
        "that task has no recorded location until its processor runs it again",
    ),
    (
        Kind.MARKER,
        lambda f: True,
        False,
        'it says which run the entries below it belong to: set it to {{"run_id": "<job.run_id>"}}'
        " by hand (removing it would remove every entry)",
    ),
    (Kind.HISTORY, lambda f: True, True, "a record only"),
    (
        Kind.CHECKPOINT,
        lambda f: True,
        False,
        "it holds input offsets: fix or remove it by hand (docs/zookeeper.md)",
    ),
)


def _leader(states: Mapping[int, BarrierState | None], unreadable: Collection[int]) -> str:
    fallback = next_to_read(states, unreadable)
    then = f"version {fallback}" if fallback is not None else "a fresh model"
    return f"a coordinator's leader publishes a clean version above it (falling back to {then})"


def plan_repair(
    findings: Collection[Finding],
    *,
    pointer: int | None,
    states: Mapping[int, BarrierState | None],
) -> list[Step]:
    """The step for each finding (:data:`REPAIR_RULES`). ``pointer``: the version the pointer
    names (None: it is unusable); ``states``: the stored versions' barrier states."""
    unreadable = {f.version for f in findings if f.kind is Kind.VERSION and f.version is not None}
    leader = _leader(states, unreadable)
    pointer_bad = any(f.kind is Kind.POINTER for f in findings)
    steps = []
    for finding in findings:
        named = finding.version is not None and finding.version == pointer
        facts = _Facts(finding.kind, named, pointer_bad)
        remove, why = next(
            (remove, why)
            for kind, holds, remove, why in REPAIR_RULES
            if kind is finding.kind and holds(facts)
        )
        steps.append(Step(finding, remove, why.format(leader=leader)))
    return steps
