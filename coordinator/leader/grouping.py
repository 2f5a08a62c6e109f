"""Grouper runs for the leader machine: :class:`RunGrouper` reads the standby lag reports into
``task_state`` and runs the grouper in its worker process; :class:`RunRecheck` asks it the
machine's fixed-point question (:mod:`coordinator.protocol.leader_probing`) once a model is in
force.

The reports are read once per run, only for the processors the grouper is given; a corrupt report
reads as missing (that copy counts as not held), logged as ``coordinator.corrupt_lag_skipped``
with its node. What the reports mean is the protocol's (:func:`task_state`); this module reads.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from coordinator.leader.grouper_worker import GrouperWorker
from coordinator.observability import CoordinatorMetrics
from coordinator.protocol.leader_events import (
    GrouperFinished,
    RecheckFinished,
    RunGrouper,
    RunRecheck,
)
from coordinator.protocol.leader_probing import recheck_metadata, task_state
from groupers import GrouperMetadata
from metadata.bulk import collector_paused
from metadata.errors import CorruptDataError
from metadata.zk import ZkMetadataStore

__all__ = ["run_grouper", "run_recheck", "with_task_state"]


def with_task_state(store: ZkMetadataStore, metadata: GrouperMetadata, log: Any) -> GrouperMetadata:
    """``metadata`` with the copies the live processors report (and each task's active)."""

    def skip(exc: CorruptDataError) -> None:
        log.warning("coordinator.corrupt_lag_skipped", node=exc.path, problem=exc.problem)

    live = sorted(metadata.processor_locality)
    lags = store.standby_lag.read(live, on_corrupt=skip)
    state = task_state(lags, metadata.previous_task_to_processor, live)
    return replace(metadata, task_state=state)


def run_grouper(
    worker: GrouperWorker,
    store: ZkMetadataStore,
    action: RunGrouper,
    *,
    timeout_s: float,
    metrics: CoordinatorMetrics,
    log: Any,
    clock: Callable[[], float] = time.monotonic,
) -> GrouperFinished:
    """Run the grouper (killed at ``timeout_s``) on the action's metadata and the copies."""
    metadata = with_task_state(store, action.metadata, log)
    outcome = worker.run(action.tasks, metadata, timeout_s)
    metrics.grouper_duration.observe(outcome.seconds)
    copies = sum(len(c) for c in metadata.task_state.values())
    log.info(
        "coordinator.grouper_ran",
        request=action.request,
        trigger=str(action.trigger) if action.trigger else None,
        processors=len(metadata.processor_locality),
        copies=copies,
        seconds=round(outcome.seconds, 3),
        ok=outcome.error is None,
    )
    return GrouperFinished(clock(), action.request, outcome.containers, outcome.error)


def run_recheck(
    worker: GrouperWorker,
    action: RunRecheck,
    *,
    timeout_s: float,
    metrics: CoordinatorMetrics,
    log: Any,
    clock: Callable[[], float] = time.monotonic,
    cancelled: Callable[[], bool] = lambda: False,
) -> RecheckFinished:
    """Ask the grouper the machine's recheck question (killed at ``timeout_s``); a failed run
    answers None (the model counts as settled: probing needs the grouper to say otherwise).
    A run that ``cancelled()`` ended (:mod:`coordinator.leader.recheck`) is not a failure."""
    with collector_paused():  # a million tasks' worth of dicts
        question = recheck_metadata(action.metadata, list(action.model.containers.values()))
    if question is None:  # (not containers: never a model in force)
        return RecheckFinished(clock(), action.version, None)
    outcome = worker.run(action.tasks, question, timeout_s)
    metrics.grouper_duration.observe(outcome.seconds)
    if outcome.error is not None and not cancelled():
        log.warning("coordinator.recheck_failed", version=action.version, error=outcome.error)
    log.info("coordinator.rechecked", version=action.version, seconds=round(outcome.seconds, 3))
    answer = outcome.containers if outcome.error is None else None
    return RecheckFinished(clock(), action.version, answer, question)
