"""The leader machine's actions that only log and count (the others write to ZooKeeper)."""

from __future__ import annotations

from typing import Any

from coordinator.observability import CoordinatorMetrics
from coordinator.protocol.leader import LeaderMachine
from coordinator.protocol.leader_events import (
    Action,
    GrouperFailed,
    ModelRefused,
    ProcessorBenched,
    ProcessorReadmitted,
    RebalanceSkipped,
)

__all__ = ["report"]


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
    elif isinstance(action, ProcessorReadmitted):
        metrics.processors_benched.set(len(core.bench.until))
        log.info(
            "coordinator.processor_readmitted", processor=action.processor_id, why=action.reason
        )
