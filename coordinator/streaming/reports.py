"""What a streaming batch reports: :class:`BatchReport` (built from the stage's task results by
:func:`batch_report`); how a query says it cannot go on (:class:`StreamingUsageError`,
:class:`StreamingBatchError`), and :func:`failure_cause`, the one line of a failed Spark job that
says why. Imports the stage's types only."""

from __future__ import annotations

import re
from dataclasses import dataclass

from coordinator.streaming.stage import StageRun
from coordinator.streaming.standby import NO_STANDBYS, StandbyStage

__all__ = [
    "BatchReport",
    "StreamingBatchError",
    "StreamingUsageError",
    "batch_report",
    "failure_cause",
]


class StreamingUsageError(ValueError):
    """``stateful_foreach_batch`` was given something it cannot use (the message says what)."""


class StreamingBatchError(RuntimeError):
    """A micro-batch failed; nothing of it was committed (Spark may run it again)."""


@dataclass(frozen=True)
class BatchReport:
    """What one micro-batch did."""

    batch: int
    version: int
    seconds: float
    tasks: int
    warm: int  # tasks whose state was in memory or in the host's local copy
    restored: int  # tasks that loaded their state from the durable checkpoints
    new: int  # tasks with nothing committed yet
    bytes_restored: int
    bytes_written: int
    pinned_ok: int
    pinned_total: int
    rows_in: int
    rows_out: int
    timed_out: int
    driver_rows: int  # the batch's rows through the driver (0; the former path: in and out)
    standby: StandbyStage = NO_STANDBYS  # the standby copies brought to this batch's commit
    after_commit_failures: int = 0  # steps after the commit that failed (done next batch)
    late_rows: int = 0  # rows dropped as late (event time at or before the late watermark)
    watermark_ms: int = -1  # the batch's event-time watermark (-1: no event-time column)


def batch_report(batch: int, version: int, stage: StageRun) -> BatchReport:
    """The figures of a batch's stage (``seconds`` and ``standby`` are set by the caller)."""
    values = list(stage.results.values())
    return BatchReport(
        batch=batch,
        version=version,
        seconds=0.0,
        tasks=len(values),
        warm=sum(1 for r in values if r.warm),
        restored=sum(1 for r in values if r.source == "restored"),
        new=sum(1 for r in values if r.source == "new"),
        bytes_restored=sum(r.bytes_restored for r in values),
        bytes_written=sum(r.bytes_written for r in values),
        pinned_ok=stage.run.pinned_ok,
        pinned_total=stage.run.total,
        rows_in=sum(r.rows_in for r in values),
        rows_out=sum(r.rows_out for r in values),
        timed_out=sum(r.timed_out for r in values),
        driver_rows=stage.driver_rows,
        late_rows=sum(r.late_rows for r in values),
    )


_RAISED = re.compile(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception|Fenced)): (.+)$")
_JAVA_THROWN = re.compile(
    r"^(?::|Caused by:)?\s*((?:org|java|scala)\.[\w.$]*(?:Error|Exception)): (.+)$"
)


def failure_cause(exc: BaseException) -> str:
    """The line of a failed Spark job that says why: the function's error, else the last error
    a Python worker raised (``Name: message``), else the first JVM exception (``Name:
    message``), else the first line."""
    text = str(exc)
    for line in text.splitlines():
        if "StatefulFunctionError:" in line:
            return line.split("StatefulFunctionError:", 1)[1].strip()
    raised = [
        f"{match.group(1).rsplit('.', 1)[-1]}: {match.group(2).strip()}"
        for match in map(_RAISED.match, text.splitlines())
        if match and not match.group(1).startswith(("pyspark.", "py4j.", "org.", "java."))
    ]
    if raised:
        return raised[-1]
    thrown = [m for m in map(_JAVA_THROWN.match, text.splitlines()) if m]
    if thrown:  # a JVM error with no Python one (e.g. Spark's Kafka source losing data)
        return f"{thrown[0].group(1).rsplit('.', 1)[-1]}: {thrown[0].group(2).strip()}"
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[0].strip() if lines else repr(exc)
