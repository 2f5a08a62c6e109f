"""``affinity coordinator run`` and ``affinity processor run``: the long-running processes.

``coordinator run`` is one replica (run several: one leads) with ``/healthz``, ``/readyz`` and
``/metrics`` on ``coordinator.http_port``. It builds its grouper first, in the worker process
every rebalance uses: a grouper that cannot be built exits 2 with one line naming the key,
before the replica connects to ZooKeeper. ``processor run`` is a sample processor: it logs what
it runs and, with ``--status-file``, reports it as JSON (rewritten atomically on every change)
and appends every start and stop to ``<status-file>.events`` (JSON lines), for tests and the
demo. Both stop cleanly on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import structlog

from coordinator.cli.common import (
    CommandError,
    check_access,
    job_store,
    starting,
    stop_on_signals,
)
from coordinator.config import ConfigError, JobConfig, environment_name, load_config
from coordinator.leader.grouper_worker import GrouperWorker
from coordinator.leader.service import CoordinatorService, grouper_worker_for
from coordinator.member.processor import ProcessorClient
from coordinator.observability import CoordinatorMetrics, HealthServer, configure_logging
from coordinator.status.batch_metrics import BatchCollector
from coordinator.status.page import status_routes
from locality.providers import get_location_provider
from metadata.ids import location_id_problem, processor_id_problem
from metadata.model import TaskModel

__all__ = ["add_commands"]


def checked_grouper(config: JobConfig, source: str, metrics: CoordinatorMetrics) -> GrouperWorker:
    """The job's grouper worker, started and its grouper built, as every rebalance builds it
    (:meth:`GrouperWorker.check`); a grouper that cannot be built is a bad configuration:
    :class:`ConfigError` naming the key (``grouper.name`` or ``grouper.options``) and where it
    was set, before the replica connects or takes part in the election."""
    worker = grouper_worker_for(config, metrics)
    failure = worker.check()
    if failure is None:
        return worker
    key = f"grouper.{failure.argument}"
    env = environment_name("grouper", failure.argument)
    where = f"the environment ({env})" if env else source
    raise ConfigError(f"invalid configuration in {where}: {key}: {failure}")


def run_coordinator(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    configure_logging(config.logging.format, config.logging.level)
    log = structlog.get_logger("affinity.coordinator")
    stop = stop_on_signals()
    metrics = CoordinatorMetrics()
    worker = checked_grouper(config, str(args.config), metrics)
    with contextlib.ExitStack() as stack:
        stack.callback(worker.close)
        with starting("coordinator run"):
            store = stack.enter_context(job_store(config))
        service = CoordinatorService(
            config, store.client, store, metrics=metrics, grouper_worker=worker
        )
        metrics.registry.register(BatchCollector(store))  # a streaming query's batches
        port = config.coordinator.http_port if args.http_port is None else args.http_port
        health = HealthServer(
            config.coordinator.http_host,
            port,
            registry=metrics.registry,
            alive=service.heartbeat.alive,
            ready=service.ready,
            routes=status_routes(store, config, service),
        ).start()
        log.info("coordinator.started", http_port=health.port, job=config.job_folder)
        try:
            service.run(stop)
        finally:
            health.stop()
    return 0


class SampleTasks:
    """The sample processor's "work": it records what it runs."""

    def __init__(
        self, processor_id: str, status_file: Path | None, catch_up_s: float = 0.0
    ) -> None:
        self.processor_id = processor_id
        self.status_file = status_file
        self.running: dict[str, int] = {}
        self.standby: dict[str, int] = {}
        self.catch_up_s = catch_up_s  # how long a new standby copy takes to catch up
        self.report_lag: Callable[[str, int], None] = lambda _task, _lag: None
        self.log = structlog.get_logger("affinity.processor").bind(processor=processor_id)

    def _event(self, kind: str, version: int | None, names: list[str]) -> None:
        if self.status_file is None:
            return
        record = {
            "t": time.time(),
            "event": kind,
            "processor": self.processor_id,
            "version": version,
            "tasks": names,
        }
        with open(f"{self.status_file}.events", "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        status = {
            "processor_id": self.processor_id,
            "pid": os.getpid(),
            "tasks": {name: v for name, v in sorted(self.running.items())},
            "standby": {name: v for name, v in sorted(self.standby.items())},
        }
        tmp = self.status_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(status))
        tmp.replace(self.status_file)

    def start(self, version: int, tasks: Mapping[str, TaskModel]) -> None:
        for name in tasks:
            self.running[name] = version
        self.log.info("sample.start", version=version, tasks=sorted(tasks))
        self._event("start", version, sorted(tasks))

    def stop(self, version: int | None, tasks: Mapping[str, TaskModel]) -> None:
        for name in tasks:
            self.running.pop(name, None)
        self.log.info("sample.stop", version=version, tasks=sorted(tasks))
        self._event("stop", version, sorted(tasks))

    def start_standby(self, version: int, tasks: Mapping[str, TaskModel]) -> None:
        """A standby copy starts behind (lag 1) and catches up (lag 0) after ``catch_up_s``."""
        for name in tasks:
            self.standby[name] = version
        self.log.info("sample.standby_start", version=version, tasks=sorted(tasks))
        self._event("standby_start", version, sorted(tasks))
        for name in tasks:
            self.report_lag(name, 1 if self.catch_up_s > 0 else 0)
        if self.catch_up_s > 0:
            timer = threading.Timer(self.catch_up_s, self._caught_up, args=(sorted(tasks),))
            timer.daemon = True
            timer.start()

    def _caught_up(self, names: list[str]) -> None:
        for name in names:
            if name in self.standby:
                self.report_lag(name, 0)

    def stop_standby(self, version: int | None, tasks: Mapping[str, TaskModel]) -> None:
        for name in tasks:
            self.standby.pop(name, None)
        self.log.info("sample.standby_stop", version=version, tasks=sorted(tasks))
        self._event("standby_stop", version, sorted(tasks))


def _capacity(text: str) -> int:
    """``--capacity``: an integer >= 1 (anything else: one line, exit 2)."""
    if not text.isdigit() or int(text) < 1:
        raise CommandError(f"--capacity must be an integer >= 1, got {text!r}")
    return int(text)


def _non_negative_ms(text: str, option: str) -> int:
    if not text.isdigit():
        raise CommandError(f"{option} must be an integer >= 0 (milliseconds), got {text!r}")
    return int(text)


def run_processor(args: argparse.Namespace) -> int:
    capacity = _capacity(args.capacity)
    config = load_config(args.config)
    configure_logging(config.logging.format, config.logging.level)
    location = args.location
    if location is None:
        location = get_location_provider(args.location_provider).location_id()
    for problem in (processor_id_problem(args.processor_id), location_id_problem(location)):
        if problem is not None:
            raise CommandError(problem)
    stop = stop_on_signals()
    catch_up_s = _non_negative_ms(args.standby_catch_up_ms, "--standby-catch-up-ms") / 1000
    status = Path(args.status_file) if args.status_file else None
    work = SampleTasks(args.processor_id, status, catch_up_s)
    with contextlib.ExitStack() as stack:
        with starting("processor run"):
            store = stack.enter_context(job_store(config))
            check_access(store)
        processor = ProcessorClient(
            store.client,
            store,
            args.processor_id,
            location,
            on_start=work.start,
            on_stop=work.stop,
            job=f"{config.job.name}-{config.job.id}",
            duplicate_wait_s=config.zookeeper.session_timeout_ms / 1000 + 1,
            capacity=capacity,
            on_start_standby=work.start_standby,
            on_stop_standby=work.stop_standby,
        )
        work.report_lag = processor.report_standby_lag
        processor.run(stop)  # DuplicateRegistration: one line, exit 1 (common.report)
    return 0


def add_commands(subparsers: Any) -> None:
    coordinator = subparsers.add_parser("coordinator", help="run a coordinator replica")
    coordinator_commands = coordinator.add_subparsers(dest="action", required=True)
    run = coordinator_commands.add_parser("run", help="one replica (several elect a leader)")
    run.add_argument("--config", required=True, help="job YAML file")
    run.add_argument("--http-port", type=int, default=None, help="override coordinator.http_port")
    run.set_defaults(handler=run_coordinator)

    processor = subparsers.add_parser("processor", help="run a sample processor")
    processor_commands = processor.add_subparsers(dest="action", required=True)
    prun = processor_commands.add_parser("run", help="register and follow the job models")
    prun.add_argument("--config", required=True, help="job YAML file")
    prun.add_argument("--processor-id", required=True)
    prun.add_argument("--location", default=None, help="location id (else from the provider)")
    prun.add_argument(
        "--location-provider", default="host", help="host, env or kubernetes (without --location)"
    )
    prun.add_argument("--status-file", default=None, help="write what runs here as JSON")
    prun.add_argument(
        "--capacity",
        default="1",
        help="how much work it takes, an integer >= 1 (default 1; balance is proportional)",
    )
    prun.add_argument(
        "--standby-catch-up-ms",
        default="0",
        help="a new standby replica reports lag 1, then 0 (caught up) after this long",
    )
    prun.set_defaults(handler=run_processor)
