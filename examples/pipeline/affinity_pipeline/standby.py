"""Standby replicas of the pipeline's tasks, kept warm on their hosts by applying deltas.

A job model's containers name, besides the tasks a processor runs, the *standby copies* it keeps
(``ContainerModel.standby_tasks``). After the active stage of batch ``b`` has checkpointed every
task, :func:`run_standby_stage` runs one more Spark stage (:func:`locality.spark.run_pinned`),
one task per (task, standby processor), pinned to that processor's executor. There
:func:`apply_standby` brings the task's copy in the local store of the executor's location up
to ``b``; that is the same file an active task at that location loads
(:class:`~affinity_pipeline.store.TaskStore`), so a task that fails over there, or moves there,
starts warm:

- copy at ``b - 1``: apply the delta of ``b`` (only the keys batch ``b`` changed): **delta bytes**;
- copy absent or further behind: read the full checkpoint of ``b``: **catch-up bytes**;
- copy already at ``b``: nothing to do.

Then :func:`report_lags` writes each copy's lag (``b`` minus the copy's batch; 0 when caught up)
to ``store.standby_lag`` under the processor id of its executor, and removes the entries of
copies the model no longer holds (and of processors that are gone), so that the next plan
(:class:`~affinity_pipeline.placement.JobModelPlacement`) sees where caught-up copies are.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from affinity_pipeline.events import PipelineConfig
from affinity_pipeline.store import TaskStore, apply_delta
from locality.spark import (
    EXECUTOR_LOCATION_ENV,
    SparkExecutorLocationIdProvider,
    current_executor_id,
    run_pinned,
)
from metadata.zk import ZkMetadataStore

if TYPE_CHECKING:
    from pyspark import SparkContext

    from affinity_pipeline.job import StatefulPipeline
    from coordinator.member.executors import ExecutorRegistrar

__all__ = [
    "StandbyInput",
    "StandbyOutcome",
    "StandbyStage",
    "apply_standby",
    "keep_standbys",
    "report_lags",
    "run_standby_stage",
]

Applied = Literal["delta", "catch-up", "current"]


@dataclass(frozen=True)
class StandbyInput:
    """What the driver sends one standby copy after batch ``batch``."""

    config: PipelineConfig
    task: str
    batch: int
    location_env: str = EXECUTOR_LOCATION_ENV


@dataclass(frozen=True)
class StandbyOutcome:
    """What one standby copy did: its batch afterwards, what it read, where it ran."""

    task: str
    batch: int
    applied: Applied
    delta_bytes: int
    catchup_bytes: int
    location: str
    executor_id: str | None
    seconds: float


def bring_up_to(store: TaskStore, batch: int) -> tuple[Applied, int, int]:
    """Bring ``store``'s local copy up to ``batch``: (what was done, delta bytes, catch-up
    bytes)."""
    local = store.local_state()
    if local is not None and local[0] == batch:
        return "current", 0, 0
    if local is not None and local[0] == batch - 1:
        found = store.read_delta(batch)
        if found is not None:
            delta, size = found
            store.write_local(batch, apply_delta(local[1], delta))
            return "delta", size, 0
    state, size = store.read_checkpoint(batch)
    store.write_local(batch, state)
    return "catch-up", 0, size


def apply_standby(key: str, payload: StandbyInput) -> StandbyOutcome:
    """Run on an executor: bring this location's copy of ``payload.task`` up to its batch."""
    start = time.perf_counter()
    location = SparkExecutorLocationIdProvider(payload.location_env).location_id()
    store = TaskStore(
        payload.task,
        local_store_dir=payload.config.local_store_dir,
        checkpoint_dir=payload.config.checkpoint_dir,
        location=location,
    )
    applied, delta_bytes, catchup_bytes = bring_up_to(store, payload.batch)
    return StandbyOutcome(
        task=payload.task,
        batch=payload.batch,
        applied=applied,
        delta_bytes=delta_bytes,
        catchup_bytes=catchup_bytes,
        location=location,
        executor_id=current_executor_id(),
        seconds=time.perf_counter() - start,
    )


@dataclass(frozen=True)
class StandbyStage:
    """One standby stage: per (task, processor) what its copy did, and the stage's figures."""

    batch: int
    outcomes: Mapping[tuple[str, str], StandbyOutcome]
    seconds: float
    pinned_ok: int
    pinned_total: int

    @property
    def delta_bytes(self) -> int:
        return sum(o.delta_bytes for o in self.outcomes.values())

    @property
    def catchup_bytes(self) -> int:
        return sum(o.catchup_bytes for o in self.outcomes.values())

    def count(self, applied: Applied) -> int:
        return sum(1 for o in self.outcomes.values() if o.applied == applied)


def _key(task: str, processor_id: str) -> str:
    return f"{task}@{processor_id}"


def run_standby_stage(
    sc: SparkContext,
    config: PipelineConfig,
    batch: int,
    copies: Mapping[str, Sequence[str]],
    executor_of: Mapping[str, str],
    *,
    locality_wait: str | None = "30s",
    location_env: str = EXECUTOR_LOCATION_ENV,
    name: str = "pipeline",
) -> StandbyStage:
    """Bring every copy of ``copies`` (processor id -> tasks) up to ``batch``, each on its
    processor's executor (``executor_of``: processor id -> executor id; copies of processors
    without one are skipped). No copies: no stage."""
    start = time.perf_counter()
    wanted = {
        (task, pid): executor_of[pid]
        for pid, tasks in copies.items()
        if pid in executor_of
        for task in tasks
    }
    if not wanted:
        return StandbyStage(batch, {}, 0.0, 0, 0)
    inputs = {
        _key(task, pid): StandbyInput(config, task, batch, location_env) for task, pid in wanted
    }
    run = run_pinned(
        sc,
        inputs,
        {_key(task, pid): executor for (task, pid), executor in wanted.items()},
        apply_standby,
        locality_wait=locality_wait,
        description=f"{name}: standbys of batch {batch}",
    )
    outcomes = {(task, pid): run.results[_key(task, pid)] for task, pid in wanted}
    return StandbyStage(batch, outcomes, time.perf_counter() - start, run.pinned_ok, run.total)


def report_lags(
    store: ZkMetadataStore,
    stage: StandbyStage,
    copies: Mapping[str, Sequence[str]],
    processor_locality: Mapping[str, str],
) -> int:
    """Write the lag of each copy of ``stage`` that ran at its processor's location (live
    processors: ``processor_locality``), and remove the entries of copies ``copies`` no longer
    names and of processors that are gone; returns the ZooKeeper writes."""
    lags: dict[str, dict[str, int]] = {}
    for (task, pid), outcome in stage.outcomes.items():
        if processor_locality.get(pid) == outcome.location:
            lags.setdefault(pid, {})[task] = max(stage.batch - outcome.batch, 0)
    written = sum(store.standby_lag.write(pid, entries) for pid, entries in lags.items())
    for pid, reported in store.standby_lag.read().items():
        if pid not in processor_locality:
            written += store.standby_lag.clear(pid)
            continue
        held = set(copies.get(pid, ())) & set(lags.get(pid, {}))
        stale = [task for task in reported if task not in held]
        if stale:
            written += store.standby_lag.remove(pid, stale)
    return written


def keep_standbys(
    pipeline: StatefulPipeline,
    store: ZkMetadataStore,
    copies: Mapping[str, Sequence[str]],
    registrar: ExecutorRegistrar,
    batch: int,
) -> StandbyStage:
    """After ``pipeline``'s batch ``batch``: bring the ``copies`` (processor id -> tasks, of the
    job model in force) up to it on the executors ``registrar`` registered, then report their
    lags to ``store``."""
    registrations = registrar.registrations
    stage = run_standby_stage(
        pipeline.sc,
        pipeline.config,
        batch,
        copies,
        {pid: r.executor.executor_id for pid, r in registrations.items()},
        locality_wait=pipeline.locality_wait,
        location_env=pipeline.location_env,
        name=pipeline.name,
    )
    report_lags(store, stage, copies, {pid: r.location_id for pid, r in registrations.items()})
    return stage
