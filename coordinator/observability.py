"""Logs, metrics and health endpoints of the long-running processes.

- :func:`configure_logging`: structlog, JSON lines when stdout is not a terminal (pods), readable
  key=value lines on a terminal. Callers bind ``job``, ``version`` and ``processor``.
- :func:`job_logger`: a logger that follows a job config's ``logging.level`` whatever the
  process-wide configuration (a Spark driver embedding a coordinator configures nothing).
- :class:`CoordinatorMetrics`: the Prometheus metrics (names in ``docs/operations.md``), on a
  registry of their own so several replicas can live in one test process.
- :class:`~coordinator.http_server.HealthServer` (re-exported here): ``/healthz`` (the main loop
  is alive), ``/readyz`` (connected to ZooKeeper) and ``/metrics`` over HTTP (GET and HEAD),
  served by a small fixed pool of threads with read timeouts; more routes through
  :meth:`HealthServer.route`.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import Any, Literal

import structlog
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)

__all__ = [
    "CoordinatorMetrics",
    "HealthServer",
    "HttpRequest",
    "HttpResponse",
    "Route",
    "configure_logging",
    "job_logger",
    "silence_job_loggers",
]

from coordinator.http_server import HealthServer, HttpRequest, HttpResponse, Route

LogFormat = Literal["auto", "json", "console"]


def configure_logging(fmt: LogFormat = "auto", level: str = "info") -> None:
    """Configure structlog (and the stdlib logging kazoo uses) for this process.

    Everything is logged to stdout in one format (kazoo's records too), so stderr carries only
    the command's own one-line error, ``affinity: error: ...``."""
    as_json = fmt == "json" or (fmt == "auto" and not sys.stdout.isatty())
    numeric = getattr(logging, level.upper(), logging.INFO)
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=sys.stdout.isatty())
    )
    shared: list[Any] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
        )
    )
    logging.basicConfig(level=max(numeric, logging.WARNING), handlers=[handler], force=True)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            *shared,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stdout),
        cache_logger_on_first_use=False,
    )


#: Set by :func:`silence_job_loggers`: the job loggers made from then on log nothing below it.
_floor = logging.NOTSET


def silence_job_loggers() -> None:
    """A command whose stdout and stderr are its answer and its one error line (``status``,
    ``jobmodel show``, ``repair``...): the job loggers made from now on drop everything below
    CRITICAL, whatever the job config's ``logging.level``."""
    global _floor
    _floor = logging.CRITICAL


def job_logger(name: str, level: str) -> Any:
    """A structlog logger named ``name`` that drops every event below ``level`` (a job config's
    ``logging.level``), whatever level structlog is configured with for the process: a library
    embedded in a user's process (the streaming handler, the coordinator it embeds, their
    ZooKeeper store) logs as its job config says. Processors and output stay the process's.
    (Unless the process silenced them: :func:`silence_job_loggers`.)"""
    numeric = max(getattr(logging, level.upper(), logging.INFO), _floor)
    return structlog.wrap_logger(
        None,
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory_args=(name,),
    )


class CoordinatorMetrics:
    """Prometheus metrics of a coordinator replica (see docs/operations.md)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.is_leader = Gauge("affinity_is_leader", "1 while this replica leads", registry=r)
        self.job_model_version = Gauge(
            "affinity_job_model_version", "Version of the job model in force", registry=r
        )
        self.rebalances = Counter("affinity_rebalances", "Job models published", registry=r)
        self.probing = Gauge(
            "affinity_probing",
            "1 while the model in force is not the grouper's final answer (warm-ups catching up, "
            "moves held back): probing rebalances run",
            registry=r,
        )
        self.rebalances_skipped = Counter(
            "affinity_rebalances_skipped",
            "Rebalances that published nothing",
            ["reason"],
            registry=r,
        )
        self.rebalance_duration = Histogram(
            "affinity_rebalance_duration_seconds",
            "From publishing a job model to its barrier's outcome",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120),
            registry=r,
        )
        self.barrier_outcomes = Counter(
            "affinity_barrier_outcomes", "Barrier outcomes", ["outcome"], registry=r
        )
        self.tasks_moved = Counter(
            "affinity_tasks_moved", "Tasks that changed processor", registry=r
        )
        self.locality_kept_ratio = Gauge(
            "affinity_locality_kept_ratio",
            "Share of tasks with a recorded location placed there, in the last job model",
            registry=r,
        )
        self.grouper_errors = Counter(
            "affinity_grouper_errors",
            "Grouper runs that raised, timed out or were invalid",
            registry=r,
        )
        self.grouper_duration = Histogram(
            "affinity_grouper_duration_seconds",
            "Time the grouper took",
            buckets=(0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
            registry=r,
        )
        self.zk_session_expirations = Counter(
            "affinity_zk_session_expirations", "ZooKeeper sessions lost", registry=r
        )
        self.zk_disconnects = Counter(
            "affinity_zk_disconnects", "ZooKeeper connections suspended", registry=r
        )
        self.leadership_changes = Counter(
            "affinity_leadership_changes", "Times this replica became leader", registry=r
        )
        self._add_hardening_metrics(r)

    def _add_hardening_metrics(self, r: CollectorRegistry) -> None:
        """Refused models, benched processors, failed elections, grouper processes, skipped
        registrations."""
        self.registrations_skipped = Gauge(
            "affinity_registrations_skipped",
            "Malformed nodes under processors/ that the last read skipped",
            registry=r,
        )
        self.models_refused = Counter(
            "affinity_models_refused",
            "Valid grouper answers not published (they would stop every running task)",
            registry=r,
        )
        self.processors_benched = Gauge(
            "affinity_processors_benched",
            "Live processors left out of the job models because they missed a barrier",
            registry=r,
        )
        self.barrier_misses = Counter(
            "affinity_barrier_misses",
            "Times a live processor let a barrier time out without joining it",
            registry=r,
        )
        self.leadership_failures = Counter(
            "affinity_leadership_failures",
            "Election or leadership attempts that failed (the replica then backs off)",
            ["reason"],
            registry=r,
        )
        self.election_backoff = Gauge(
            "affinity_election_backoff_seconds",
            "How long this replica waits before taking part in the election again (0: it does)",
            registry=r,
        )
        self.grouper_worker_restarts = Counter(
            "affinity_grouper_worker_restarts",
            "Grouper worker processes started (the first one, and after a kill or a crash)",
            registry=r,
        )
        self.unreadable_recoveries = Counter(
            "affinity_unreadable_model_recoveries",
            "Leaderships that found the model in force or the version pointer unreadable and "
            "republished, by what they fell back to (older model, fresh model)",
            ["fallback"],
            registry=r,
        )
        self.unreadable_model = Gauge(
            "affinity_unreadable_model",
            "1 from a leadership finding the model in force unreadable until it published a "
            "version replacing it",
            registry=r,
        )


class Heartbeat:
    """The main loop beats; ``/healthz`` fails when it has not beaten for ``stale_after_s``."""

    def __init__(self, stale_after_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._stale_after = stale_after_s
        self._last = clock()

    def beat(self) -> None:
        self._last = self._clock()

    def alive(self) -> bool:
        return self._clock() - self._last < self._stale_after
