"""Conformance kit for grouper plugin authors, and the scenarios and oracles of our own tests.

Two things for plugin authors (needs ``hypothesis``, a test dependency, not a runtime one):

- hypothesis strategies that make grouper inputs (:mod:`groupers.testing.strategies`):
  :func:`grouper_inputs` draws ``(tasks, metadata)`` with live and vanished processors, flat and
  hierarchical location ids, task locality that is mostly consistent with the previous
  assignment and sometimes stale or unknown;
- :func:`check_grouper` (:mod:`groupers.testing.kit`), which asserts the contract on many drawn
  inputs and on the edge cases:

  * validity: :func:`groupers.validate` accepts every answer;
  * purity: the same answer for shuffled inputs, for a second call, and in fresh interpreters
    with other ``PYTHONHASHSEED`` values (the grouper must be picklable for that part, as any
    grouper defined at module level is);
  * totality: no crash on an empty task set, one processor, more processors than tasks, or
    localities no processor has;
  * SEP-32 virtual tasks: :func:`virtual_grouper_inputs` draws a split or merge (the elasticity
    factor doubled, halved, or changed from/to 1) with the previous tasks' stream partitions in
    ``previous_task_to_ssps``, so history is recorded under names that no longer exist; these
    are checked for validity and purity too;
- :func:`check_replica_options` (:mod:`groupers.testing.replicas`), for a grouper that takes the
  replica options (``standby_replicas``, ``max_warmup_replicas``, ``acceptable_recovery_lag``,
  ``max_moves_per_rebalance``): the rules of DESIGN.md "Replicas and capacity" that show in its
  answers (standby counts, warm-up moves only to caught-up copies, the movement limit, balance
  by capacity), on inputs with capacities, copies and several streams, and on the named
  scenarios with caught-up copies of :mod:`groupers.testing.copies`
  (:func:`check_caught_up_scenarios`: copies on every processor cost no spread; a move to a
  caught-up copy comes before any warm-up for that room).

Use it from a test::

    from groupers.testing import check_grouper

    def test_my_grouper_conforms():
        check_grouper(MyGrouper())

For tests and benchmarks: :mod:`groupers.testing.scenarios` (named rebalances: one leaves, one
joins, scale, rolling restart), :mod:`groupers.testing.copies` (named scenarios with caught-up
copies, from Kafka Streams' HighAvailabilityTaskAssignorTest) and
:mod:`groupers.testing.oracles` (the best any balanced answer can do: movement lower bound, best
locality; how evenly an answer spreads each stream). Those do not need hypothesis (the names
above are loaded on first use); the exact locality oracle needs networkx.

May import ``groupers`` and ``metadata.model``; nothing here is imported by the product.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from groupers.testing.copies import check_caught_up_scenarios
    from groupers.testing.kit import canonical, check_grouper
    from groupers.testing.replicas import check_replica_options
    from groupers.testing.strategies import (
        GrouperInput,
        grouper_inputs,
        locations,
        task_models,
        virtual_grouper_inputs,
    )

__all__ = [
    "GrouperInput",
    "canonical",
    "check_caught_up_scenarios",
    "check_grouper",
    "check_replica_options",
    "grouper_inputs",
    "locations",
    "task_models",
    "virtual_grouper_inputs",
]

_HOME = {
    "GrouperInput": "strategies",
    "canonical": "kit",
    "check_caught_up_scenarios": "copies",
    "check_grouper": "kit",
    "check_replica_options": "replicas",
    "grouper_inputs": "strategies",
    "locations": "strategies",
    "task_models": "strategies",
    "virtual_grouper_inputs": "strategies",
}


def __getattr__(name: str) -> Any:
    """Load the hypothesis-based names on first use, so that the scenarios and oracles can be
    imported where hypothesis is not installed (the benchmarks' environment)."""
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
