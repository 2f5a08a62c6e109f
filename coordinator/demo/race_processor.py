"""The streaming race with a Spark 4 ``StatefulProcessor`` instead of a function: the same
processor (:class:`ClickBuckets`, MapState-heavy) run by Spark's own
``groupBy("user").transformWithStateInPandas`` with the RocksDB state store
(:class:`SparkProcessorWay`) and by affinity's ``stateful_processor_foreach_batch``
(:class:`AffinityProcessorWay`). Everything else (input, figures, failures) is the race's
(:mod:`coordinator.demo.race_ways`); ``StreamingRace(..., processor=True)`` picks these ways.

:class:`ClickBuckets` gives the race function's output (running clicks and value total per
user) so both ways are checked against the same single-process reference, and keeps per user a
``MapState`` of clicks and value total per value bucket (:data:`BUCKETS` of them: most batches
update many entries of a large map), plus the race's incompressible padding in a ``ValueState``
so both ways checkpoint as much state as the function's race. Imported on the executors
(pyspark, pandas and the standard library only).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from coordinator.demo.race_function import padding
from coordinator.demo.race_ways import OUTPUT_SCHEMA, AffinityWay, SparkWay

__all__ = ["BUCKETS", "AffinityProcessorWay", "ClickBuckets", "SparkProcessorWay"]

#: Value buckets a user's MapState holds (``value mod BUCKETS``).
BUCKETS = 64


class ClickBuckets(StatefulProcessor):
    """Per user: running clicks and total (ValueState), clicks and total per value bucket
    (MapState), and the padding (ValueState); outputs ``user, clicks, total``."""

    def init(self, handle: Any) -> None:
        self.totals = handle.getValueState("totals", "clicks long, total long")
        self.buckets = handle.getMapState("buckets", "bucket int", "clicks long, total long")
        self.blob = handle.getValueState("blob", "blob string")

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Any]:
        import pandas as pd

        clicks, total = self.totals.get() or (0, 0)
        blob = (self.blob.get() or ("",))[0]
        pad = len(blob)
        for pdf in rows:
            clicks += len(pdf)
            total += int(pdf["value"].sum())
            pad = max(pad, int(pdf["pad"].max()))
            grouped = pdf.groupby(pdf["value"] % BUCKETS)["value"].agg(["size", "sum"])
            for bucket, n, added in grouped.itertuples():
                old = self.buckets.getValue((int(bucket),)) or (0, 0)
                self.buckets.updateValue((int(bucket),), (old[0] + int(n), old[1] + int(added)))
        self.totals.update((clicks, total))
        if len(blob) != pad:
            self.blob.update((padding(str(key[0]), pad),))
        yield pd.DataFrame({"user": [key[0]], "clicks": [clicks], "total": [total]})

    def close(self) -> None:
        pass


class SparkProcessorWay(SparkWay):
    """Spark's own ``transformWithStateInPandas`` of :class:`ClickBuckets` (RocksDB)."""

    def stateful(self, grouped: Any) -> Any:
        return grouped.transformWithStateInPandas(ClickBuckets(), OUTPUT_SCHEMA, "Update", "None")


class AffinityProcessorWay(AffinityWay):
    """:class:`ClickBuckets` through ``stateful_processor_foreach_batch``."""

    def make_handler(self) -> Any:
        from coordinator.streaming import stateful_processor_foreach_batch

        return stateful_processor_foreach_batch(
            ClickBuckets(),
            key_columns=["user"],
            output_schema=OUTPUT_SCHEMA,
            time_mode="None",
            sink=self._sink,
            config=self.config,
        )
