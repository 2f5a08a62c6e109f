"""``affinity demo``: a user's ``applyInPandasWithState`` query over Spark's file source, run
side by side by Spark's own stateful operator (RocksDB state store provider, changelog
checkpointing) and by affinity's ``stateful_foreach_batch`` with a real coordinator, through an
executor loss and an application restart (:mod:`coordinator.demo.streaming_race`).

It starts a private ZooKeeper (:mod:`coordinator.launchers.zookeeper`), a standalone Spark cluster
with workers on 127.0.0.2-4 (one executor each) and one application running both queries on the
same input files. affinity's driver member registers the executors as processors and follows the
job models of a coordinator embedded in the driver; each task runs on the executor its model
names and keeps its state on that host. After a few batches one executor is killed (its worker
starts a replacement on the same host), later the application is restarted from the same
checkpoints. Per batch: how many tasks found their state where they ran, the state bytes loaded
from the checkpoints and the batch's duration, for both.

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
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from coordinator.demo.race_ways import WAYS, RaceBatch, RaceInput
from coordinator.demo.report import (
    STRATEGIES,
    BatchFigures,
    DemoResult,
    Progress,
    percent,
    plot,
    table,
)
from coordinator.demo.streaming_race import StreamingRace

__all__ = ["DemoResult", "run_demo", "step_figures"]

NUM_TASKS = 4  # affinity tasks and Spark state partitions
NUM_KEYS = 200  # users: batch 0 fills the state of every one
EVENTS_PER_BATCH = 50
PAD = 40_000  # state characters per user (8 MB of state in all)


class DemoError(RuntimeError):
    """The demo could not run (missing package, a process that did not start, a timeout)."""


def _pyspark() -> Any:
    """The ``pyspark`` package, imported lazily."""
    try:
        return importlib.import_module("pyspark")
    except ImportError as exc:
        raise DemoError(f"affinity demo needs PySpark: pip install -e '.[spark]' ({exc})") from None


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
    """The streaming race (:class:`StreamingRace`) with the demo's phases and figures."""

    def __init__(
        self, workdir: Path, batches: int, progress: Progress, source: str = "kafka"
    ) -> None:
        _pyspark()
        self.batches = batches
        self.progress = progress
        self.race = StreamingRace(
            workdir,
            RaceInput(workdir / "input", users=NUM_KEYS, rows=EVENTS_PER_BATCH, pad=PAD),
            tasks=NUM_TASKS,
            note=progress.note,
            kafka=source == "kafka",
        )
        self.result = DemoResult()

    def stop(self) -> None:
        self.race.stop()
        _stop_driver_jvms()

    def phases(self) -> dict[int, str]:
        """Batch index -> the failure before it: an executor killed, then the application
        restarted."""
        kill = max(2, self.batches * 3 // 8)
        restart = max(kill + 1, self.batches * 3 // 4)
        return {kill: "executor killed", restart: "application restarted"}

    def run(self) -> None:
        try:
            self._run()
        except TimeoutError as exc:  # executors or a job model that did not come in time
            raise DemoError(str(exc)) from None

    def _run(self) -> None:
        started = time.perf_counter()
        self.race.start()
        failures = self.phases()
        label = "steady"
        for index in range(self.batches):
            if failures.get(index) == "executor killed":
                self.race.kill_executor()
            elif failures.get(index) == "application restarted":
                self.race.restart_application()
            label = failures.get(index, label)
            self.record(index, label, self.race.step(label))
        self.result.output_correct = self.race.outputs_equal()
        self.result.versions = self.race.versions()
        self.result.tasks_moved = self.race.tasks_moved()
        self.result.seconds = time.perf_counter() - started

    def record(self, index: int, label: str, done: dict[str, list[RaceBatch]]) -> None:
        """Demo batch ``index``'s figures, one row per way (the table's and the progress
        line's, the same by construction)."""
        for name, way in zip(STRATEGIES, WAYS, strict=True):
            self.result.batches[name].append(step_figures(index, label, done[way]))
        a = self.result.batches["affinity"][-1]
        d = self.result.batches["spark state store"][-1]
        self.progress.step(
            f"batch {index} ({label}): affinity {percent(a.warm_ratio)} warm, "
            f"{a.bytes_restored:,} B loaded; Spark {percent(d.warm_ratio)} warm, "
            f"{d.bytes_restored:,} B loaded"
        )


def step_figures(index: int, label: str, batches: list[RaceBatch]) -> BatchFigures:
    """One demo batch of one way: the sum over the query batches that ran it. Spark's Kafka
    source may run a demo batch as two of its batches (it plans each partition's end apart), or
    a commit marker alone as one without records; a row per query batch would put the two ways'
    rows of different demo batches side by side."""
    return BatchFigures(
        index,
        label,
        sum(b.warm for b in batches),
        sum(b.tasks - b.warm for b in batches),
        sum(b.bytes_loaded for b in batches),
        sum(b.seconds for b in batches),
        sum(b.rows_in for b in batches),
        sum(b.driver_rows for b in batches),
    )


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
    if args.batches < 4:
        print("affinity demo: --batches must be at least 4", file=sys.stderr)
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
                demo = Demo(
                    workdir.resolve(), args.batches, progress, getattr(args, "source", "kafka")
                )
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
