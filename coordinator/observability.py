"""Logs, metrics and health endpoints of the long-running processes.

- :func:`configure_logging`: structlog, JSON lines when stdout is not a terminal (pods), readable
  key=value lines on a terminal. Callers bind ``job``, ``version`` and ``processor``.
- :class:`CoordinatorMetrics`: the Prometheus metrics (names in ``docs/operations.md``), on a
  registry of their own so several replicas can live in one test process.
- :class:`HealthServer`: ``/healthz`` (the main loop is alive), ``/readyz`` (connected to
  ZooKeeper) and ``/metrics`` over HTTP, in a daemon thread.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

import structlog
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

__all__ = ["CoordinatorMetrics", "HealthServer", "configure_logging"]

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


class HealthServer:
    """``/healthz``, ``/readyz`` and ``/metrics`` on ``host:port`` (port 0: any free port)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        registry: CollectorRegistry,
        alive: Callable[[], bool],
        ready: Callable[[], bool],
    ) -> None:
        server_self = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._reply(200, generate_latest(server_self.registry), CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    ok = server_self.alive()
                    self._reply(200 if ok else 503, b"ok\n" if ok else b"stalled\n")
                elif path == "/readyz":
                    ok = server_self.ready()
                    self._reply(200 if ok else 503, b"ready\n" if ok else b"not ready\n")
                else:
                    self._reply(404, b"not found\n")

            def _reply(self, code: int, body: bytes, ctype: str = "text/plain") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return  # probes every few seconds would flood the log

        self.registry = registry
        self.alive = alive
        self.ready = ready
        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="health-http", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


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
