"""The standby stage of ``stateful_foreach_batch``: after a micro-batch is committed, bring every
standby copy the job model names to that commit, and report each copy's lag.

With ``standby_replicas`` in the grouper's options, the model in force names for each task the
executors (processors) that keep a copy of its state. :func:`refresh_standbys` runs one Spark
task per copy, pinned to its executor (:func:`locality.spark.run_pinned`), which copies the
batch's checkpoint files into that host's local copy
(:func:`locality.spark.state.standby.refresh_on_executor`); then it reports through the driver
member a lag of 0 for each copy refreshed where the model put it, and 1 for a copy whose
executor was gone or whose refresh failed. The leader reads those reports: a task whose
executor is lost fails over to an executor with a caught-up copy, where it opens its state
``local`` (warm), and a warm-up copy lets its task move once it is caught up.

A failed standby stage fails nothing: the batch is committed already; the copies count as
behind until a later refresh succeeds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from coordinator.member.spark_driver import DriverAssignment, SparkDriverMember
from locality.spark import run_pinned
from locality.spark.state import CommitRecord, StoreSpec
from locality.spark.state.standby import StandbyOutcome, StandbyWork, refresh_on_executor

__all__ = ["StandbyStage", "refresh_standbys"]


@dataclass(frozen=True)
class StandbyStage:
    """What one batch's standby stage did."""

    copies: int  # standby copies the model in force names
    refreshed: int  # copies brought to the commit where the model put them
    full: int  # of those, copies copied in full (new, or behind by more than one commit)
    bytes_applied: int  # checkpoint bytes copied to standby hosts
    seconds: float

    def figures(self) -> dict[str, object]:
        """What a batch's log line says of the stage (nothing without standbys)."""
        if not self.copies:
            return {}
        return {
            "standby_copies": self.copies,
            "standby_refreshed": self.refreshed,
            "standby_bytes": self.bytes_applied,
            "standby_s": round(self.seconds, 3),
        }


NO_STANDBYS = StandbyStage(0, 0, 0, 0, 0.0)


def refresh_standbys(
    sc: Any,
    driver: SparkDriverMember,
    store: StoreSpec,
    assignment: DriverAssignment,
    commit: CommitRecord,
    previous: CommitRecord | None,
    *,
    locality_wait: str | None,
    log: Any,
) -> StandbyStage:
    """Refresh every standby copy of ``assignment`` to ``commit`` (``previous``: the commit
    before it, which the copies should be at) and report their lags."""
    began = time.perf_counter()
    copies = {
        f"{task}@{pid}": (task, pid)
        for task, pids in assignment.standbys.items()
        if task in commit.tokens
        for pid in pids
    }
    if not copies:
        return NO_STANDBYS
    payloads = {name: (store, _work(task, commit, previous)) for name, (task, _) in copies.items()}
    placement = driver.placement({name: pid for name, (_, pid) in copies.items()})
    try:
        run = run_pinned(
            sc,
            payloads,
            placement,
            refresh_on_executor,
            locality_wait=locality_wait,
            description=f"affinity standbys of batch {commit.batch}",
        )
    except Exception as exc:  # the batch is committed: the copies just stay behind
        log.warning("streaming.standby_refresh_failed", batch=commit.batch, error=str(exc))
        for task, pid in copies.values():
            driver.report_standby_lag(pid, task, 1)
        return StandbyStage(len(copies), 0, 0, 0, time.perf_counter() - began)
    done: list[StandbyOutcome] = []
    for name, ran in run.tasks.items():
        task, pid = copies[name]
        if ran.pinned:
            done.append(ran.result)
        driver.report_standby_lag(pid, task, 0 if ran.pinned else 1)
    return StandbyStage(
        copies=len(copies),
        refreshed=len(done),
        full=sum(1 for o in done if o.mode == "full"),
        bytes_applied=sum(o.bytes_applied for o in done),
        seconds=time.perf_counter() - began,
    )


def _work(task: str, commit: CommitRecord, previous: CommitRecord | None) -> StandbyWork:
    before = None
    if previous is not None and task in previous.tokens:
        before = (previous.batch, previous.tokens[task])
    groups = tuple(commit.key_groups[task])
    return StandbyWork(task, commit.batch, commit.tokens[task], groups, before)
