"""A committed batch's report, written to the job's history in ZooKeeper (``history/batch-<id>``,
:mod:`metadata.zk.recipe.batches`) so that ``affinity status``, the status page and the
coordinator's ``/metrics`` show the streaming query without the driver's Python.

:func:`batch_entry` builds the entry from what the driver knows after the commit: the batch's
plan (each task's pinned executor), its tasks' results (where each ran, its state's source and
bytes), the live executors' locations and the input's lag. :func:`record_batch` writes it; the
runtime runs it as one of its steps after the commit (a failure is logged and counted there,
never failing the committed batch).

Usage (what :class:`~coordinator.streaming.runtime.QueryRuntime` does after a commit)::

    entry = batch_entry(plan, stage, version=7, began=began, locations={"1": "zone-a/host-1"},
                        lag={"events-0": 12})
    record_batch(store, entry, keep=50)
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from coordinator.streaming.stage import BatchPlan, StageRun
from metadata.zk import ZkMetadataStore
from metadata.zk.recipe.batches import BatchEntry, TaskPlace

__all__ = ["batch_entry", "executor_locations", "record_batch"]


def executor_locations(driver: Any) -> dict[str, str]:
    """Executor id -> its location id, of the executors the driver member registered."""
    registrations = driver.registrar.registrations.values()
    return {r.executor.executor_id: r.location_id for r in registrations}


def batch_entry(
    plan: BatchPlan,
    stage: StageRun,
    *,
    version: int,
    began: float,
    locations: Mapping[str, str],
    lag: Mapping[str, int],
    clock: Any = time,
) -> BatchEntry:
    """The history entry of a batch planned as ``plan`` that ran as ``stage`` following job
    model ``version``; its seconds: from ``began`` (``clock.perf_counter()``) to now."""
    results = [stage.results[t] for t in sorted(stage.results)]
    places = tuple(
        TaskPlace(
            task=r.task,
            executor=r.executor_id,
            location=locations.get(r.executor_id) if r.executor_id else None,
            pinned_to=plan.placement.get(r.task),
            source=r.source,
            bytes_restored=r.bytes_restored,
            bytes_written=r.bytes_written,
            rows_in=r.rows_in,
            seconds=round(r.seconds, 3),
        )
        for r in results
    )
    return BatchEntry(
        batch=plan.batch,
        written_at=clock.time(),
        version=version,
        seconds=round(clock.perf_counter() - began, 3),
        rows_in=sum(r.rows_in for r in results),
        rows_out=sum(r.rows_out for r in results),
        tasks=len(results),
        warm=sum(1 for r in results if r.warm),
        restored=sum(1 for r in results if r.source == "restored"),
        new=sum(1 for r in results if r.source == "new"),
        bytes_restored=sum(r.bytes_restored for r in results),
        bytes_written=sum(r.bytes_written for r in results),
        pinned_ok=stage.run.pinned_ok,
        pinned_total=stage.run.total,
        places=places,
        lag=dict(sorted(lag.items())),
    )


def record_batch(store: ZkMetadataStore | None, entry: BatchEntry, *, keep: int) -> None:
    """Write ``entry`` to the job's batch history, keeping the newest ``keep``."""
    if store is None:
        raise RuntimeError(f"batch {entry.batch}: the query is closed (no ZooKeeper store)")
    store.batches.record(entry, keep=keep)
