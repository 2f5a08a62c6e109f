"""Heartbeats: batches on an idle stream, so processing-time timeouts fire without new input.

Spark runs a *no-data batch* when one of its own stateful operators has a timeout or a watermark
to process (``MicroBatchExecution``: ``shouldRunAnotherBatch``), so an idle
``applyInPandasWithState`` query still times keys out. A ``foreachBatch`` sink is not a stateful
operator: with no new input Spark runs no batch and calls no handler, so a key's timeout under
``stateful_foreach_batch`` fires only at the next batch that has input.

:func:`with_heartbeat` unions the stream with Spark's ``rate`` source (one row a second), every
user column null and a marker column :data:`HEARTBEAT_COLUMN` true: the source always has new
rows, so Spark runs a batch at each trigger, with or without input (start the query with
``.trigger(processingTime="10 seconds")``: a timed-out key is then reported within one interval).
The runtime calls :func:`drop_heartbeats` first in every batch, so the function never sees a
heartbeat row::

    stream = with_heartbeat(spark.readStream...load())
    query = stream.writeStream.foreachBatch(handler).trigger(processingTime="10 seconds")...
"""

from __future__ import annotations

from typing import Any

__all__ = ["HEARTBEAT_COLUMN", "drop_heartbeats", "with_heartbeat"]

#: The marker column: true on heartbeat rows, false on the stream's own rows.
HEARTBEAT_COLUMN = "_affinity_heartbeat"


def with_heartbeat(stream_df: Any, *, rows_per_second: int = 1) -> Any:
    """``stream_df`` with heartbeat rows (``rows_per_second`` of them, from the ``rate``
    source): all of ``stream_df``'s columns null, :data:`HEARTBEAT_COLUMN` true."""
    from pyspark.sql import functions as F

    if HEARTBEAT_COLUMN in stream_df.columns:
        raise ValueError(f"the stream already has a {HEARTBEAT_COLUMN} column (a heartbeat)")
    if not stream_df.isStreaming:
        raise ValueError("with_heartbeat takes a streaming DataFrame (spark.readStream...)")
    beats = (
        stream_df.sparkSession.readStream.format("rate")
        .option("rowsPerSecond", rows_per_second)
        .load()
        .select(
            *(F.lit(None).cast(field.dataType).alias(field.name) for field in stream_df.schema),
            F.lit(True).alias(HEARTBEAT_COLUMN),
        )
    )
    return stream_df.withColumn(HEARTBEAT_COLUMN, F.lit(False)).unionByName(beats)


def drop_heartbeats(df: Any) -> Any:
    """A batch without its heartbeat rows and without the marker column (unchanged if it has
    none)."""
    if HEARTBEAT_COLUMN not in df.columns:
        return df
    from pyspark.sql import functions as F

    return df.where(~F.col(HEARTBEAT_COLUMN)).drop(HEARTBEAT_COLUMN)
