"""``affinity demo``: the reference stateful pipeline on a real Spark cluster, placed by a real
coordinator, against Spark's default placement.

It starts a private ZooKeeper (:mod:`coordinator.embedded_zk`), a :class:`CoordinatorService` in a
thread (debounce 500 ms, one input stream of N partitions, ``group-by-partition``,
``host-affinity``) and a standalone Spark cluster with workers on 127.0.0.2-4 (one executor each).
The driver registers the executors as processors (:class:`ExecutorRegistrar`) and acts as their
processor client: on each new job-model version it joins barrier v for every executor it
registered that the model names, waits for DONE, and runs the next batch with the model's
placement; after a batch it writes the task locality. The same batches also run with Spark's
default placement (no preferred locations). Half-way, one executor is killed (its worker starts a
replacement with a new id on the same host); the coordinator publishes a new version.

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
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from coordinator.config import JobConfig, load_config
from coordinator.embedded_zk import EmbeddedZooKeeper
from coordinator.leader.service import CoordinatorService
from metadata.model import JobModel
from metadata.zk import ZkMetadataStore, connect

__all__ = ["DemoResult", "run_demo"]

HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
LOCALITY_WAIT = "30s"
STRATEGIES = ("affinity", "spark default")
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


@dataclass
class BatchFigures:
    batch: int
    label: str
    warm: int
    cold: int
    bytes_restored: int

    @property
    def warm_ratio(self) -> float | None:
        known = self.warm + self.cold
        return self.warm / known if known else None


@dataclass
class DemoResult:
    batches: dict[str, list[BatchFigures]] = field(
        default_factory=lambda: {name: [] for name in STRATEGIES}
    )
    versions: list[int] = field(default_factory=list)  # job-model versions put in force
    tasks_moved: int = 0
    output_correct: bool = False
    seconds: float = 0.0

    def totals(self, name: str) -> dict[str, Any]:
        rows = self.batches[name]
        warm = sum(b.warm for b in rows)
        cold = sum(b.cold for b in rows)
        return {
            "warm_ratio": round(warm / (warm + cold), 4) if warm + cold else None,
            "bytes_restored": sum(b.bytes_restored for b in rows),
            "warm": warm,
            "cold": cold,
        }

    def figures(self) -> dict[str, Any]:
        affinity = self.totals("affinity")
        default = self.totals("spark default")
        return {
            "affinity": {
                "warm_ratio": affinity["warm_ratio"],
                "bytes_restored": affinity["bytes_restored"],
                "tasks_moved": self.tasks_moved,
                "versions": len(self.versions),
            },
            "spark_default": {
                "warm_ratio": default["warm_ratio"],
                "bytes_restored": default["bytes_restored"],
            },
            "output_correct": self.output_correct,
        }


class Progress:
    """A one-line text progress bar on stderr."""

    def __init__(self, total: int, width: int = 30) -> None:
        self.total = total
        self.width = width
        self.done = 0
        self.tty = sys.stderr.isatty()

    def note(self, message: str) -> None:
        self._write(f"{self._bar()} {message}")

    def step(self, message: str) -> None:
        self.done += 1
        self._write(f"{self._bar()} {message}")

    def _bar(self) -> str:
        filled = self.width * self.done // max(1, self.total)
        return f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total}"

    def _write(self, line: str) -> None:
        if self.tty:
            sys.stderr.write("\r\033[K" + line)
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


class DriverAgent:
    """The processor client of the executors the driver registered: waits for the job model
    naming exactly the registered processors, joins its barrier for them, waits for DONE."""

    def __init__(self, store: ZkMetadataStore, registrar: Any) -> None:
        self.store = store
        self.registrar = registrar
        self.in_force: JobModel | None = None
        self.joined: set[int] = set()
        self._changed = threading.Event()
        self._watch = store.watch_version(lambda _v: self._changed.set())

    def close(self) -> None:
        self._watch.stop()

    def model(self, timeout_s: float = MODEL_TIMEOUT_S) -> JobModel:
        """The job model in force for the registered executors (joining newer barriers)."""
        deadline = time.monotonic() + timeout_s
        while True:
            registered = set(self.registrar.registrations)
            latest = self.store.read_latest_version()
            if latest is not None:
                model = self.store.read_job_model(latest)
                if latest not in self.joined:
                    for pid in sorted(set(model.containers) & registered):
                        self.store.join_barrier(latest, pid)
                    self.joined.add(latest)
                state = self.store.barrier_state(latest)
                if state == "DONE" and set(model.containers) == registered:
                    self.in_force = model
                    return model
            if time.monotonic() > deadline:
                raise DemoError(
                    f"no job model in force for {sorted(registered)} within {timeout_s:.0f}s "
                    f"(latest version {latest})"
                )
            self._changed.wait(0.1)
            self._changed.clear()


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
        self.registrar: Any = None
        self.agent: DriverAgent | None = None

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
        from coordinator.member.executors import ExecutorRegistrar

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
        self.registrar = ExecutorRegistrar.for_context(sc, self.store)
        self.agent = DriverAgent(self.store, self.registrar)
        self.pipelines = {
            name: self.ap.StatefulPipeline(sc, c, name=name)
            for name, c in self.pipeline_configs.items()
        }

    def stop(self) -> None:
        steps = [
            lambda: self.agent.close() if self.agent is not None else None,
            lambda: self.registrar.close() if self.registrar is not None else None,
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
        self.agent = self.registrar = self.session = None

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
        assert self.agent is not None and self.registrar is not None
        self.registrar.sync()
        previous = self.agent.in_force
        model = self.agent.model()
        if previous is None or model.version != previous.version:
            self.result.versions.append(model.version)
            if previous is not None:
                before = previous.task_to_processor()
                self.result.tasks_moved += sum(
                    1 for t, p in model.task_to_processor().items() if before.get(t) != p
                )
        placement: dict[str, str] = self.registrar.placement(model.task_to_processor())
        return placement

    def run_batch(self, index: int, label: str) -> None:
        order = STRATEGIES if index % 2 == 0 else tuple(reversed(STRATEGIES))
        for name in order:
            if name == "affinity":
                report = self.pipelines[name].run_batch(self.placement())
                self.store.write_task_locality(report.task_locality)
            else:
                report = self.pipelines[name].run_batch(None)
            self.reports[name].append(report)
            self.result.batches[name].append(
                BatchFigures(report.batch, label, report.warm, report.cold, report.bytes_restored)
            )
        a = self.result.batches["affinity"][-1].warm_ratio
        d = self.result.batches["spark default"][-1].warm_ratio
        self.progress.step(
            f"batch {index} ({label}): warm affinity {_pct(a)}, spark default {_pct(d)}"
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


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def warm_cold(totals: dict[str, Any]) -> str:
    return f"{totals['warm']}/{totals['cold']}"


def table(result: DemoResult) -> str:
    figures = result.figures()
    a, d = result.totals("affinity"), result.totals("spark default")
    lines = [
        f"{'batch':<7}{'phase':<12}{'affinity warm':>15}{'restored B':>12}"
        f"{'default warm':>15}{'restored B':>12}",
    ]
    for fa, fd in zip(result.batches["affinity"], result.batches["spark default"], strict=True):
        lines.append(
            f"{fa.batch:<7}{fa.label:<12}{_pct(fa.warm_ratio):>15}{fa.bytes_restored:>12,}"
            f"{_pct(fd.warm_ratio):>15}{fd.bytes_restored:>12,}"
        )
    lines += [
        "",
        f"{'':<28}{'affinity':>14}{'spark default':>16}",
        f"{'job-model versions':<28}{len(result.versions):>14}{'-':>16}",
        f"{'tasks moved':<28}{result.tasks_moved:>14}{'-':>16}",
        f"{'warm ratio':<28}{_pct(a['warm_ratio']):>14}{_pct(d['warm_ratio']):>16}",
        f"{'warm / cold task runs':<28}{warm_cold(a):>14}{warm_cold(d):>16}",
        f"{'bytes restored':<28}{a['bytes_restored']:>14,}{d['bytes_restored']:>16,}",
        f"{'output == reference':<28}{'yes' if figures['output_correct'] else 'NO':>14}"
        f"{'yes' if figures['output_correct'] else 'NO':>16}",
        "",
        f"versions in force: {result.versions}; whole run {result.seconds:.0f} s",
    ]
    return "\n".join(lines)


def plot(result: DemoResult, path: Path) -> None:
    try:
        matplotlib: Any = importlib.import_module("matplotlib")
        matplotlib.use("Agg")
        plt: Any = importlib.import_module("matplotlib.pyplot")
    except ImportError:
        raise DemoError("--plot needs matplotlib: pip install matplotlib") from None
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(8, 6))
    for name in STRATEGIES:
        rows = result.batches[name]
        xs = [b.batch for b in rows]
        top.plot(xs, [b.warm_ratio for b in rows], marker="o", label=name)
        bottom.plot(xs, [b.bytes_restored for b in rows], marker="o", label=name)
    kill = next((b.batch for b in result.batches["affinity"] if b.label != "steady"), None)
    for axis in (top, bottom):
        if kill is not None:
            axis.axvline(kill - 0.5, color="grey", linestyle="--", label="executor killed")
        axis.legend()
    top.set_ylabel("warm ratio")
    top.set_ylim(-0.05, 1.05)
    bottom.set_ylabel("bytes restored")
    bottom.set_xlabel("batch")
    fig.suptitle("affinity demo: host affinity vs Spark default placement")
    fig.savefig(path)
    plt.close(fig)


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
