"""A streaming query's last batch as Prometheus metrics on the coordinator's ``/metrics``.

The driver writes each committed batch to the job's history in ZooKeeper
(:mod:`metadata.zk.recipe.batches`); :class:`BatchCollector` reads the newest entry when
Prometheus scrapes (at most once per ``min_interval_s``, whatever the number of scrapers) and
exports its figures as gauges. A job with no batch exports none of them but
``affinity_streaming_history_readable``. A read that fails is logged, exported as
``affinity_streaming_history_readable 0`` and answered with the last entry read, so the
coordinator's own metrics still reach Prometheus; without a ZooKeeper connection it does not
try (a scrape does not wait out the store's retries).

Usage (``affinity coordinator run`` does this)::

    metrics.registry.register(BatchCollector(store))

=====================================================  ===========================================
metric (gauges)                                        the newest batch's
=====================================================  ===========================================
``affinity_streaming_last_batch``                      id
``affinity_streaming_batch_seconds``                   seconds, from its start to its report
``affinity_streaming_batch_rows``                      rows in
``affinity_streaming_batch_tasks{state}``              tasks ``warm``, ``restored``, ``new``
``affinity_streaming_batch_bytes{kind}``               state bytes ``restored``, ``written``
``affinity_streaming_batch_tasks_off_executor``        tasks that ran off their pinned executor
``affinity_streaming_kafka_lag{partition}``            records behind, per input partition
``affinity_streaming_batch_timestamp_seconds``         UNIX time it was written
=====================================================  ===========================================
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

import structlog
from kazoo.exceptions import KazooException
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from metadata.errors import MetadataError
from metadata.zk import ZkMetadataStore
from metadata.zk.recipe.batches import BatchEntry

__all__ = ["BatchCollector", "exported_families"]

_P = "affinity_streaming_"


class BatchCollector(Collector):
    """The newest batch of the job's history as gauges (see the module docstring)."""

    def __init__(
        self,
        store: ZkMetadataStore,
        *,
        min_interval_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.min_interval_s = min_interval_s
        self.clock = clock
        self._lock = threading.Lock()
        self._read_at: float | None = None
        self._entry: BatchEntry | None = None
        self._readable = True
        self.log = structlog.get_logger("affinity.status").bind(folder=store.layout.folder)

    def _newest(self) -> tuple[BatchEntry | None, bool]:
        with self._lock:
            now = self.clock()
            if self._read_at is None or now - self._read_at >= self.min_interval_s:
                self._read_at = now
                self._readable = self._read()
            return self._entry, self._readable

    def _read(self) -> bool:
        """Read the newest entry; False (logged) if it could not be read. Without a connection
        it does not try: a scrape must not wait out the store's retries."""
        if not self.store.client.connected:
            self.log.warning("status.batch_metrics_read_failed", error="ZooKeeper not connected")
            return False
        try:
            entries = self.store.batches.read(limit=1)
        except (MetadataError, KazooException) as exc:
            self.log.warning("status.batch_metrics_read_failed", error=str(exc))
            return False
        self._entry = entries[-1] if entries else None
        return True

    def describe(self) -> Iterable[Metric]:
        return exported_families()

    def collect(self) -> Iterable[Metric]:
        entry, readable = self._newest()
        return _families(entry, readable=readable)


def exported_families() -> list[Metric]:
    """Every family a :class:`BatchCollector` may export (without reading ZooKeeper)."""
    return _families(None, readable=True, every=True)


def _gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(_P + name, doc, labels=list(labels))


def _families(entry: BatchEntry | None, *, readable: bool, every: bool = False) -> list[Metric]:
    readable_family = _gauge(
        "history_readable", "1 when the last read of the job's batch history succeeded"
    )
    readable_family.add_metric([], 1.0 if readable else 0.0)
    families: list[Metric] = [readable_family]
    if entry is None and not every:
        return families
    last = _gauge("last_batch", "Id of the newest streaming batch in the job's history")
    seconds = _gauge(
        "batch_seconds", "Seconds the newest streaming batch took, from its start to its report"
    )
    rows = _gauge("batch_rows", "Rows into the newest streaming batch")
    tasks = _gauge("batch_tasks", "Tasks of the newest batch by their state's source", ("state",))
    state_bytes = _gauge(
        "batch_bytes", "State bytes the newest batch restored and wrote", ("kind",)
    )
    off = _gauge(
        "batch_tasks_off_executor",
        "Tasks of the newest batch that ran away from the executor they were pinned to",
    )
    lag = _gauge(
        "kafka_lag", "Records behind per input partition after the newest batch", ("partition",)
    )
    written = _gauge("batch_timestamp_seconds", "UNIX time the newest batch was written")
    if entry is not None:
        last.add_metric([], entry.batch)
        seconds.add_metric([], entry.seconds)
        rows.add_metric([], entry.rows_in)
        for state, count in (("warm", entry.warm), ("restored", entry.restored)):
            tasks.add_metric([state], count)
        tasks.add_metric(["new"], entry.new)
        state_bytes.add_metric(["restored"], entry.bytes_restored)
        state_bytes.add_metric(["written"], entry.bytes_written)
        off.add_metric([], sum(1 for p in entry.places if p.off))
        for partition, behind in sorted(entry.lag.items()):
            lag.add_metric([partition], behind)
        written.add_metric([], entry.written_at)
    return [*families, last, seconds, rows, tasks, state_bytes, off, lag, written]
