"""``affinity demo``: the reference stateful pipeline on a real Spark cluster, placed by a real
coordinator, against Spark's default placement.

It starts a private ZooKeeper (:mod:`coordinator.demo.zookeeper`), a :class:`CoordinatorService`
in a thread (debounce 500 ms, one input stream of N partitions, ``group-by-partition``,
``host-affinity``) and a standalone Spark cluster with workers on 127.0.0.2-4 (one executor each).
The driver plays its executors' member role (:class:`SparkDriverMember`: each executor a
processor, followed through the same member machine as ``affinity processor run``): on each new
job-model version it joins barrier v for the executors the model names, and once it is DONE runs
the next batch with the model's placement; after a batch it writes the task locality. The same
batches also run with Spark's default placement (no preferred locations). Half-way, one executor
is killed (its worker starts a replacement with a new id on the same host); the coordinator
publishes a new version.

Every process started here (ZooKeeper, the Spark JVMs, the coordinator thread) is stopped at the
end, also on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from coordinator.config import JobConfig, load_config
from coordinator.demo.report import (
    STRATEGIES,
    BatchFigures,
    DemoResult,
    Progress,
    percent,
    plot,
    table,
)
from coordinator.demo.zookeeper import EmbeddedZooKeeper
from coordinator.leader.service import CoordinatorService
from coordinator.member.spark_driver import DriverAssignment, SparkDriverMember
from groupers.measures import tasks_moved
from metadata.zk import ZkMetadataStore, connect

__all__ = ["DemoResult", "run_demo"]

HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
LOCALITY_WAIT = "30s"
NUM_TASKS = 12
NUM_KEYS = 2_000
EVENTS_PER_BATCH = 1_000
MODEL_TIMEOUT_S = 60.0


class DemoError(RuntimeError):
    """The demo could not run (missing package, a process that did not start, a timeout)."""


def _pipeline() -> Any:
    """The ``affinity_pipeline`` package (examples/pipeline), imported lazily."""
    try:
        module = importlib.import_module("affinity_pipeline")
        importlib.import_module("affinity_pipeline.cluster")
    except ImportError as exc:
        raise DemoError(
            "affinity demo needs the reference pipeline and PySpark: "
            "pip install -e '.[spark]' -e examples/pipeline"
            f" ({exc})"
        ) from None
    return module


def job_config(num_tasks: int) -> JobConfig:
    """The demo job: one stream of ``num_tasks`` partitions, host-affinity, 500 ms debounce."""
    ap = _pipeline()
    return load_config(
        data={
            "job": {"name": "affinity-demo", "id": "1", "run_id": "demo"},
            "inputs": [
                {"system": ap.INPUT_SYSTEM, "stream": ap.INPUT_STREAM, "partitions": num_tasks}
            ],
            "ssp_grouper": {"name": "group-by-partition"},
            "grouper": {"name": "host-affinity"},
            "coordinator": {
                "debounce_ms": 500,
                "debounce_max_ms": 5000,
                "barrier_timeout_ms": 20000,
                "processor_grace_ms": 0,
            },
        },
        environ={},
    )


def _stop_driver_jvms(timeout_s: float = 5.0) -> None:
    """Stop this process's Spark driver JVMs (pyspark's gateway), e.g. one whose start-up a
    Ctrl-C interrupted: nothing else would stop it."""
    me = str(os.getpid())
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
            if fields[1] == me and b"org.apache.spark.deploy.SparkSubmit" in cmdline:
                pids.append(int(stat.parent.name))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout_s
        while pids and time.monotonic() < deadline:
            for pid in list(pids):
                with contextlib.suppress(ChildProcessError, OSError):
                    if os.waitpid(pid, os.WNOHANG)[0] == pid:
                        pids.remove(pid)
            time.sleep(0.05)
        if not pids:
            return


class Demo:
    """ZooKeeper, the coordinator, the Spark cluster, the application and both pipelines."""

    def __init__(self, workdir: Path, batches: int, progress: Progress) -> None:
        ap = _pipeline()
        self.ap = ap
        self.workdir = workdir
        self.batches = batches
        self.progress = progress
        self.zookeeper = EmbeddedZooKeeper(workdir / "zookeeper")
        self.cluster = ap.cluster.StandaloneCluster(workdir / "spark", HOSTS)
        self.config = job_config(NUM_TASKS)
        self.pipeline_configs = {
            name: ap.PipelineConfig(
                local_store_dir=str(workdir / slug / "local"),
                checkpoint_dir=str(workdir / slug / "checkpoints"),
                num_tasks=NUM_TASKS,
                num_keys=NUM_KEYS,
                events_per_batch=EVENTS_PER_BATCH,
            )
            for name, slug in zip(STRATEGIES, ("affinity", "default"), strict=True)
        }
        self.result = DemoResult()
        self.reports: dict[str, list[Any]] = {name: [] for name in STRATEGIES}
        self.clients: list[Any] = []
        self.stop_coordinator = threading.Event()
        self.coordinator_thread: threading.Thread | None = None
        self.session: Any = None
        self.driver: SparkDriverMember | None = None
        self.in_force: DriverAssignment | None = None

    # ------------------------------------------------------------------ set-up / tear-down

    def _store(self) -> ZkMetadataStore:
        client = connect(self.zookeeper.hosts, session_timeout_s=10.0)
        self.clients.append(client)
        return ZkMetadataStore(
            client,
            self.config.job_folder,
            run_id=self.config.job.run_id,
            retention=self.config.coordinator.retention,
        )

    def start(self) -> None:

        self.progress.note("starting ZooKeeper ...")
        self.zookeeper.start()
        coordinator_store = self._store()
        coordinator_store.ensure_layout()
        service = CoordinatorService(
            self.config, coordinator_store.client, coordinator_store, identifier="demo-leader"
        )
        self.coordinator_thread = threading.Thread(
            target=service.run, args=(self.stop_coordinator,), name="coordinator", daemon=True
        )
        self.coordinator_thread.start()
        self.store = self._store()
        self.progress.note("starting the Spark cluster (master + 3 workers) ...")
        self.cluster.start()
        self.session = self.ap.cluster.spark_session(
            self.cluster.master_url,
            app_name="affinity-demo",
            locality_wait=LOCALITY_WAIT,
            log4j_config=self.cluster.quiet_log4j_config,
        )
        self.progress.note("waiting for the executors ...")
        self.wait_executors()
        sc = self.session.sparkContext
        self.driver = SparkDriverMember(
            self.store.client, self.store, sc, job=f"{self.config.job.name}-{self.config.job.id}"
        )
        self.pipelines = {
            name: self.ap.StatefulPipeline(sc, c, name=name)
            for name, c in self.pipeline_configs.items()
        }

    def stop(self) -> None:
        steps = [
            lambda: self.driver.close() if self.driver is not None else None,
            lambda: self.session.stop() if self.session is not None else None,
            self.cluster.stop,
            self.stop_coordinator.set,
            lambda: self.coordinator_thread.join(10) if self.coordinator_thread else None,
        ]
        steps += [lambda c=c: (c.stop(), c.close()) for c in self.clients]
        steps += [self.zookeeper.stop, _stop_driver_jvms]
        for step in steps:
            with contextlib.suppress(Exception):
                step()
        self.driver = self.session = None

    def executors(self) -> list[Any]:
        from locality.spark import SparkExecutors

        return list(SparkExecutors(self.session.sparkContext).list())

    def wait_executors(self, gone: tuple[str, ...] = ()) -> list[Any]:
        deadline = time.monotonic() + 120
        while True:
            live = self.executors()
            ids = {e.executor_id for e in live}
            if sorted(e.host for e in live) == sorted(HOSTS) and not ids & set(gone):
                return live
            if time.monotonic() > deadline:
                raise DemoError(f"executors: {live}, wanted one on each of {HOSTS}")
            time.sleep(0.2)

    def prime(self) -> None:
        """A no-op task on every executor (starts the Python workers of a new executor)."""
        from locality.spark import run_pinned

        live = self.executors()
        run_pinned(
            self.session.sparkContext,
            dict.fromkeys((e.executor_id for e in live), None),
            {e.executor_id: e.executor_id for e in live},
            lambda task, payload: None,
            locality_wait=LOCALITY_WAIT,
        )

    # ------------------------------------------------------------------ batches

    def placement(self) -> dict[str, str]:
        assert self.driver is not None
        self.driver.sync()
        previous = self.in_force
        try:
            current = self.driver.in_force(MODEL_TIMEOUT_S)
        except TimeoutError as exc:
            raise DemoError(str(exc)) from None
        if previous is None or current.version != previous.version:
            self.result.versions.append(current.version)
            if previous is not None:
                self.result.tasks_moved += tasks_moved(
                    previous.task_to_processor, current.task_to_processor
                )
        self.in_force = current
        return self.driver.placement(current.task_to_processor)

    def run_batch(self, index: int, label: str) -> None:
        order = STRATEGIES if index % 2 == 0 else tuple(reversed(STRATEGIES))
        for name in order:
            if name == "affinity":
                report = self.pipelines[name].run_batch(self.placement())
                self.store.locality.write(report.task_locality)
            else:
                report = self.pipelines[name].run_batch(None)
            self.reports[name].append(report)
            self.result.batches[name].append(
                BatchFigures(report.batch, label, report.warm, report.cold, report.bytes_restored)
            )
        a = self.result.batches["affinity"][-1].warm_ratio
        d = self.result.batches["spark default"][-1].warm_ratio
        self.progress.step(
            f"batch {index} ({label}): warm affinity {percent(a)}, spark default {percent(d)}"
        )

    def kill_executor(self) -> str:
        victim = next(e for e in self.executors() if e.host == HOSTS[-1])
        app_id = self.session.sparkContext.applicationId
        self.progress.note(f"killing executor {victim.executor_id} on {victim.host} ...")
        self.cluster.kill_executor(app_id, victim.executor_id)
        self.wait_executors(gone=(victim.executor_id,))
        self.prime()
        return f"executor {victim.executor_id} on {victim.host} killed"

    def run(self) -> None:
        started = time.perf_counter()
        self.start()
        self.prime()
        before = max(2, (self.batches + 1) // 2)
        label = "steady"
        for index in range(self.batches):
            if index == before:
                self.kill_executor()
                label = "after kill"
            self.run_batch(index, label)
        self.result.output_correct = self.check_outputs()
        self.result.seconds = time.perf_counter() - started

    def check_outputs(self) -> bool:
        for name in STRATEGIES:
            reports = self.reports[name]
            reference = self.ap.reference_outputs(self.pipeline_configs[name], range(len(reports)))
            if any(r.outputs != reference[r.batch] for r in reports):
                return False
        return True


# ---------------------------------------------------------------------- output
@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (and SIGHUP) raise KeyboardInterrupt, so ``finally`` blocks clean up."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def run_demo(args: argparse.Namespace) -> int:
    if args.batches < 3:
        print("affinity demo: --batches must be at least 3", file=sys.stderr)
        return 2
    if args.plot is not None:
        try:
            importlib.import_module("matplotlib")
        except ImportError:
            print("affinity demo: --plot needs matplotlib: pip install matplotlib", file=sys.stderr)
            return 2
    for name in ("kazoo", "py4j", "affinity", "metadata", "locality"):
        logging.getLogger(name).setLevel(logging.ERROR)
    with contextlib.suppress(Exception):
        import structlog

        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    own_workdir = args.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="affinity-demo-") if own_workdir else args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    progress = Progress(args.batches)
    demo: Demo | None = None
    try:
        with _terminate_as_interrupt():
            try:
                demo = Demo(workdir.resolve(), args.batches, progress)
                demo.run()
            finally:
                progress.note("stopping every process ...")
                progress.close()
                if demo is not None:
                    demo.stop()
    except DemoError as exc:
        print(f"affinity demo: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("affinity demo: interrupted; every process stopped", file=sys.stderr)
        return 130
    finally:
        if own_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    assert demo is not None
    result = demo.result
    print(table(result))
    if args.plot is not None:
        plot(result, args.plot)
        print(f"wrote {args.plot}")
    if args.json:
        sys.stdout.write(json.dumps(result.figures()) + "\n")
    return 0 if result.output_correct else 1
