"""groupers: pure-function TaskNameGroupers and SSP groupers, their registry, and the
conformance kit for plugin authors (``groupers.testing``).

- ``api``: the contract (GrouperMetadata, the protocols, validate) and the helpers every grouper
  shares; ``registry``: names -> groupers (builtins and entry points);
- ``host_affinity`` (phases) over ``assignment`` (the state and its moves), ``tree`` (the location
  tree and its sweep) and ``sheds``; ``failover``, ``holdback`` and ``warmup`` (caught-up copies);
  ``round_robin``; ``ssp``, ``virtual``, ``keys``, ``keygroups``, ``locations``;
- ``matching``: the one graph module (max flow, assignment, min-cost flow); ``measures``: tasks
  moved, kept local, movement lower bound;
- ``testing``: conformance kit, scenarios and oracles (tests and benchmarks only).

May import ``metadata.model`` (and nothing else of the project: not ``coordinator``,
``locality`` or ``metadata.zk``). Nothing here does I/O: a grouper is a function of its inputs
(DESIGN.md "Grouper contract", invariant I6).
"""

from groupers.api import (
    GrouperError,
    GrouperMetadata,
    InvalidAssignment,
    SspGrouper,
    TaskNameGrouper,
    UnknownGrouperError,
    validate,
)
from groupers.host_affinity import HostAffinityGrouper
from groupers.registry import get_grouper, get_ssp_grouper, grouper_names, ssp_grouper_names
from groupers.round_robin import RoundRobinGrouper
from groupers.ssp import GroupByPartition, GroupBySsp

__all__ = [
    "GroupByPartition",
    "GroupBySsp",
    "GrouperError",
    "GrouperMetadata",
    "HostAffinityGrouper",
    "InvalidAssignment",
    "RoundRobinGrouper",
    "SspGrouper",
    "TaskNameGrouper",
    "UnknownGrouperError",
    "get_grouper",
    "get_ssp_grouper",
    "grouper_names",
    "ssp_grouper_names",
    "validate",
]
