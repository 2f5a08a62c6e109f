"""groupers: pure-function TaskNameGroupers and SSP groupers, their registry, and the
conformance kit for plugin authors (``groupers.testing``).

May import ``metadata.model`` (and nothing else of the project). Nothing here does I/O: a
grouper is a function of its inputs (DESIGN.md "Grouper contract", invariant I6).
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
