"""Logging and counting the leader machine's actions (the service carries out their writes)."""

from __future__ import annotations

from typing import Any

from coordinator.observability import CoordinatorMetrics
from coordinator.protocol.leader import LeaderMachine
from coordinator.protocol.leader_events import (
    Action,
    GrouperFailed,
    InForceUnreadable,
    MarkBarrier,
    ModelRefused,
    ProcessorBenched,
    ProcessorReadmitted,
    PublishJobModel,
    RebalanceSkipped,
)
from metadata.model import BarrierState

__all__ = ["report", "report_barrier", "report_published"]


def report(
    action: Action, core: LeaderMachine, metrics: CoordinatorMetrics, log: Any, now: float
) -> None:
    """Log and count ``action`` (``now``: the machine's clock, for the cool-down left)."""
    if isinstance(action, GrouperFailed):
        metrics.grouper_errors.inc()
        log.error("coordinator.grouper_failed", request=action.request, error=action.reason)
    elif isinstance(action, RebalanceSkipped):
        metrics.rebalances_skipped.labels(reason=action.reason).inc()
        log.info("coordinator.rebalance_skipped", reason=action.reason)
    elif isinstance(action, ModelRefused):
        metrics.models_refused.inc()
        log.error("coordinator.model_refused", request=action.request, reason=action.reason)
    elif isinstance(action, ProcessorBenched):
        metrics.barrier_misses.inc()
        metrics.processors_benched.set(len(core.bench.until))
        log.warning(
            "coordinator.processor_benched",
            processor=action.processor_id,
            missed_barrier=action.version,
            misses=action.misses,
            seconds=round(action.until - now, 1),
        )
    elif isinstance(action, InForceUnreadable):
        metrics.unreadable_recoveries.labels(fallback=str(action.recovery)).inc()
        metrics.unreadable_model.set(1)
        log.error(
            "coordinator.model_in_force_unreadable",
            nodes=[u.node for u in action.unreadable],
            problems=[u.problem for u in action.unreadable],
            fallback_version=action.fallback,
            recovery=str(action.recovery),
            note=action.note,
        )
    elif isinstance(action, ProcessorReadmitted):
        metrics.processors_benched.set(len(core.bench.until))
        log.info(
            "coordinator.processor_readmitted", processor=action.processor_id, why=action.reason
        )


def report_barrier(action: MarkBarrier, metrics: CoordinatorMetrics, log: Any) -> None:
    """Count and log a barrier's decision."""
    outcome = "done" if action.state == BarrierState.DONE else "timed_out"
    metrics.barrier_outcomes.labels(outcome=outcome).inc()
    metrics.rebalance_duration.observe(action.duration_s)
    log.info(
        "coordinator.barrier",
        version=action.version,
        state=action.state,
        seconds=round(action.duration_s, 3),
    )


def report_published(action: PublishJobModel, metrics: CoordinatorMetrics, log: Any) -> None:
    """Count and log a published version: what moved and the locality kept."""
    metrics.rebalances.inc()
    metrics.tasks_moved.inc(action.moved)
    if action.repair:
        metrics.unreadable_model.set(0)
    if action.with_locality:
        metrics.locality_kept_ratio.set(action.locality_kept / action.with_locality)
    log.info(
        "coordinator.published",
        version=action.model.version,
        processors=len(action.participants),
        moved=action.moved,
        locality_kept=action.locality_kept,
        with_locality=action.with_locality,
        **({"replaces_unreadable": True} if action.repair else {}),
    )
