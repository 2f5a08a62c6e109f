"""Host affinity on a real Spark cluster: warm state, bytes restored and batch time through
executor loss, a rolling restart of the executors and an application restart.

A standalone master and three workers on 127.0.0.2, 127.0.0.3 and 127.0.0.4 (one 512 MB
executor each: three hosts on one machine) run the reference pipeline (``examples/pipeline``)
three times side by side in the same application, on the same events, through the same failures:

- **affinity**: each batch runs with the placement of a job model: the executors are registered
  as processors in a private ZooKeeper (``ExecutorRegistrar``, location = executor host), the
  ``host-affinity`` grouper assigns the tasks using the task locality (where each task last ran,
  written to ZooKeeper after each batch), and every task is pinned to its executor
  (``run_pinned``, ``spark.locality.wait`` 30 s);
- **affinity + standby**: the same, with one standby replica per task (``standby_replicas=1``)
  and warm-up (``max_warmup_replicas=2``, ``acceptable_recovery_lag=0``): after each batch one
  more pinned stage applies the batch's checkpoint deltas to the standby copies on their hosts
  (``affinity_pipeline.standby``), and their lags, reported to ZooKeeper, are the grouper's
  ``task_state``: a lost task fails over to its copy, and a move waits until its target's copy
  is caught up;
- **spark default**: the same stages with no preferred locations (Spark's own placement; the
  state-store locality Spark keeps in the driver does not apply to these RDD tasks, and would be
  lost on an application restart anyway).

A task is **warm** when the local store of the host it runs on holds its state of the previous
batch, else **cold**: it reads its checkpoint (**bytes restored**). Phases: steady state; one
worker killed (its executor is lost); the worker back; a rolling restart (each executor killed in
turn, one batch after each; the worker starts a replacement with a new id on the same host);
more batches; the application restarted (new executors, new ids; ZooKeeper keeps the locality);
a scale-out from 3 to 4 executors (a fourth worker on 127.0.0.5).

Usage: ``python benchmarks/spark_affinity.py [--quick] [--doc PATH] [--no-write] [--json]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))
sys.path.insert(0, str(_ROOT / "tests"))
sys.path.insert(0, str(_ROOT / "examples" / "pipeline"))

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

import structlog  # noqa: E402
from affinity_pipeline import (  # noqa: E402
    PipelineConfig,
    StatefulPipeline,
    reference_outputs,
)
from affinity_pipeline.cluster import StandaloneCluster, spark_session  # noqa: E402
from affinity_pipeline.placement import JobModelPlacement  # noqa: E402
from affinity_pipeline.standby import keep_standbys  # noqa: E402

from benchmarks._report import DOC, write_section  # noqa: E402
from benchmarks._spark_affinity_report import (  # noqa: E402
    HOSTS,
    LOCALITY_WAIT,
    NEW_HOST,
    STANDBY,
    STRATEGIES,
    PhaseStats,
    report,
    summary,
)
from coordinator.launchers.zookeeper import EmbeddedZooKeeper as ZooKeeperServer  # noqa: E402
from coordinator.member.executors import ExecutorRegistrar  # noqa: E402
from locality.spark import (  # noqa: E402
    SparkExecutor,
    SparkExecutors,
    executor_host_location,
    run_pinned,
)
from metadata.zk import ZkMetadataStore, connect  # noqa: E402

SLUGS = {"affinity": "affinity", STANDBY: "standby", "spark default": "default"}
GROUPER_OPTIONS: dict[str, dict[str, int]] = {
    "affinity": {},
    STANDBY: {"standby_replicas": 1, "max_warmup_replicas": 2, "acceptable_recovery_lag": 0},
}


@dataclass(frozen=True)
class Sizes:
    tasks: int
    keys: int
    events: int
    steady: int  # batches before any failure (the first one has no state yet)
    per_phase: int  # batches after each failure


FULL = Sizes(tasks=24, keys=20_000, events=6_000, steady=4, per_phase=3)
QUICK = Sizes(tasks=12, keys=2_000, events=1_000, steady=2, per_phase=1)


class Experiment:
    """The cluster, ZooKeeper, the application and both pipelines."""

    def __init__(self, workdir: Path, sizes: Sizes) -> None:
        self.workdir = workdir
        self.sizes = sizes
        self.hosts = HOSTS
        self.cluster = StandaloneCluster(workdir / "spark", HOSTS)
        self.zookeeper = ZooKeeperServer(workdir / "zookeeper")
        self.configs = {
            name: PipelineConfig(
                local_store_dir=str(workdir / slug / "local"),
                checkpoint_dir=str(workdir / slug / "checkpoints"),
                num_tasks=sizes.tasks,
                num_keys=sizes.keys,
                events_per_batch=sizes.events,
            )
            for name, slug in SLUGS.items()
        }
        self.session: Any = None
        self.registrars: dict[str, ExecutorRegistrar] = {}
        self.pipelines: dict[str, StatefulPipeline] = {}
        self.phases: list[tuple[str, dict[str, PhaseStats]]] = []
        self.events: list[str] = []
        self.batch_index = 0

    # ------------------------------------------------------------------ set-up

    def start(self) -> None:
        self.zookeeper.start()
        self.client = connect(self.zookeeper.hosts, session_timeout_s=10.0)
        self.stores: dict[str, ZkMetadataStore] = {}
        self.placements: dict[str, JobModelPlacement] = {}
        for i, (name, options) in enumerate(GROUPER_OPTIONS.items(), start=1):
            store = ZkMetadataStore(self.client, f"/affinity/spark-bench-{i}", run_id="bench")
            store.ensure_layout()
            self.stores[name] = store
            self.placements[name] = JobModelPlacement(
                store, self.sizes.tasks, grouper_options=options
            )
        self.cluster.start()
        self.start_app()

    def start_app(self) -> None:
        self.session = spark_session(
            self.cluster.master_url,
            app_name="affinity-benchmark",
            locality_wait=LOCALITY_WAIT,
            log4j_config=self.cluster.quiet_log4j_config,
        )
        self.wait_executors()
        sc = self.session.sparkContext
        self.registrars = {
            # the hosts, as measured before executors were probed (the same here, without probes)
            name: ExecutorRegistrar.for_context(sc, store, location_of=executor_host_location)
            for name, store in self.stores.items()
        }
        self.pipelines = {
            name: StatefulPipeline(sc, c, name=SLUGS[name]) for name, c in self.configs.items()
        }

    def stop_app(self) -> None:
        for registrar in self.registrars.values():
            registrar.close()
        self.registrars = {}
        if self.session is not None:
            self.session.stop()
            self.session = None

    def stop(self) -> None:
        try:
            self.stop_app()
        finally:
            try:
                self.cluster.stop()
            finally:
                if getattr(self, "client", None) is not None:
                    self.client.stop()
                    self.client.close()
                self.zookeeper.stop()

    @property
    def executors(self) -> SparkExecutors:
        return SparkExecutors(self.session.sparkContext)

    def wait_executors(
        self, hosts: tuple[str, ...] | None = None, gone: tuple[str, ...] = ()
    ) -> list[SparkExecutor]:
        """Wait until exactly one executor per host of ``hosts`` (default: the cluster's) is
        live, none of ``gone``."""
        hosts = self.hosts if hosts is None else hosts
        deadline = time.monotonic() + 120
        while True:
            live = self.executors.list()
            ids = {e.executor_id for e in live}
            if sorted(e.host for e in live) == sorted(hosts) and not ids & set(gone):
                return live
            if time.monotonic() > deadline:
                raise TimeoutError(f"executors: {live}, wanted one on each of {hosts}")
            time.sleep(0.2)

    # ------------------------------------------------------------------ batches

    def run_batch(self, stats: dict[str, PhaseStats]) -> None:
        # Rotate which pipeline goes first, so none always finds the executors warmer.
        shift = self.batch_index % len(STRATEGIES)
        order = STRATEGIES[shift:] + STRATEGIES[:shift]
        self.batch_index += 1
        for name in order:
            if name in self.placements:
                self.run_planned(name, stats[name])
            else:
                stats[name].batches.append(self.pipelines[name].run_batch(None))

    def run_planned(self, name: str, stats: PhaseStats) -> None:
        """One batch of a job-model pipeline: plan, run, keep the standbys, record."""
        registrar, placement = self.registrars[name], self.placements[name]
        registrar.sync()
        step = placement.plan()
        if step.new_version:
            stats.versions += 1
            stats.moved += len(step.moved)
        report = self.pipelines[name].run_batch(registrar.placement(step.task_to_processor))
        if GROUPER_OPTIONS[name].get("standby_replicas"):
            stats.deferred.append(len(step.deferred))
            copies = step.standby_copies
            store = self.stores[name]
            stats.standbys.append(
                keep_standbys(self.pipelines[name], store, copies, registrar, report.batch)
            )
        placement.record(report.task_locality)
        stats.batches.append(report)

    def prime(self) -> None:
        """One no-op task on every executor, so a new executor's Python workers are up before a
        measured batch (that start-up costs the same whatever the placement)."""
        live = self.executors.list()
        run_pinned(
            self.session.sparkContext,
            dict.fromkeys((e.executor_id for e in live), None),
            {e.executor_id: e.executor_id for e in live},
            lambda task, payload: None,
            locality_wait=LOCALITY_WAIT,
        )

    def phase(self, label: str, batches: int, before: Callable[[], None] | None = None) -> None:
        stats = {name: PhaseStats() for name in STRATEGIES}
        print(f"{label} ...", flush=True)
        if before is not None:
            before()
        self.prime()
        for _ in range(batches):
            self.run_batch(stats)
        self.phases.append((label, stats))

    # ------------------------------------------------------------------ failures

    def kill_worker(self, host: str) -> None:
        self.cluster.kill_worker(host)
        self.wait_executors(tuple(h for h in HOSTS if h != host))

    def start_worker(self, host: str) -> None:
        self.cluster.start_worker(host)
        self.wait_executors()

    def scale_out(self, host: str) -> None:
        self.hosts = (*self.hosts, host)
        self.start_worker(host)

    def restart_executor(self, executor: SparkExecutor) -> None:
        app_id = self.session.sparkContext.applicationId
        self.cluster.kill_executor(app_id, executor.executor_id)
        self.wait_executors(gone=(executor.executor_id,))

    def restart_app(self) -> None:
        self.stop_app()
        self.start_app()

    # ------------------------------------------------------------------ the run

    def run(self) -> None:
        sizes = self.sizes
        self.phase("first batch (no state yet)", 1)
        self.phase("steady state", sizes.steady)
        self.phase(
            "worker 127.0.0.4 killed", sizes.per_phase, lambda: self.kill_worker("127.0.0.4")
        )
        self.phase("worker 127.0.0.4 back", sizes.per_phase, lambda: self.start_worker("127.0.0.4"))
        rolling = {name: PhaseStats() for name in STRATEGIES}
        print("rolling restart of the executors ...", flush=True)
        for executor in self.executors.list():
            self.restart_executor(executor)
            self.prime()
            self.run_batch(rolling)
        self.phases.append(("rolling restart (a batch after each)", rolling))
        self.phase("after the rolling restart", sizes.per_phase)
        self.phase("application restarted", sizes.per_phase, self.restart_app)
        self.phase(
            f"scale-out: 4th worker ({NEW_HOST})",
            sizes.per_phase + 2,
            lambda: self.scale_out(NEW_HOST),
        )

    def check_outputs(self) -> bool:
        """Every batch of both pipelines equals the single-process reference."""
        batches = self.batch_index
        for name in STRATEGIES:
            reference = reference_outputs(self.configs[name], range(batches))
            for _, stats in self.phases:
                for batch in stats[name].batches:
                    if batch.outputs != reference[batch.batch]:
                        return False
        return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    parser.add_argument("--doc", type=Path, default=DOC, help="Markdown file to write")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON last")
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    logging.getLogger("py4j").setLevel(logging.ERROR)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="spark-affinity-") as workdir:
        experiment = Experiment(Path(workdir), QUICK if args.quick else FULL)
        try:
            print("starting ZooKeeper, the Spark cluster and the application ...", flush=True)
            experiment.start()
            experiment.run()
            output_ok = experiment.check_outputs()
        finally:
            experiment.stop()
    figures = summary(experiment.phases)
    figures["output_correct"] = output_ok
    markdown = report(experiment, figures, output_ok, time.perf_counter() - started)
    print()
    print(markdown)
    if not args.no_write:
        write_section("spark_affinity", markdown, doc=args.doc)
        print(f"wrote section 'spark_affinity' of {args.doc}")
    if args.json:
        print(json.dumps(figures, sort_keys=True))
    return 0 if output_ok else 1


if __name__ == "__main__":
    sys.exit(main())
