"""A deduplication with TTL (``ttlDurationMs``), run both ways on the 3-worker cluster: by
pyspark's own ``transformWithStateInPandas`` and by ``stateful_processor_foreach_batch``,
outputs compared batch by batch, exactly; entries really expire between batches and the same
values, coming again, are emitted again. affinity's run goes through an executor kill and an
application restart.

**The same batch times both ways.** A TTL is counted from a batch's processing time, which
each engine reads from its own clock: Spark's is ``batchTimestampMs``, taken by the
micro-batch loop when it plans the batch (``triggerClock.getTimeMillis()``), written to the
offset log (``<checkpoint>/offsets/<batch>``) with the batch and given to the operator
(``timerValues``, the TTL's expiry and its check); affinity's is taken by the driver when the
batch begins and written to the batch's pending record, which every later attempt of the batch
reads (:func:`locality.spark.state.write_pending`). Spark runs first; its batch timestamps are
read from its offset log and written as affinity's pending records before affinity's run, so
affinity's batches run at exactly Spark's times (a re-run batch keeps its recorded time, the
record exists for that): the comparison is exact, whatever the machine's load. The processor
emits the processing time it was given, so the equality of the outputs also shows the times
were the same.

**Why expiry cannot flake.** Spark's run waits :data:`LONG_GAP_S` (12 s) before writing the
file of each batch in :data:`EXPIRING`: that batch's timestamp is taken after its file exists,
so more than 12 s after the previous batch's (which was done before the wait) -- every
short-TTL entry (10 s) written earlier has expired by then, however slow the machine. The
hour-long TTL never expires within the test. Whether a short-TTL entry survives between the
quick batches depends on the machine (they are usually 2 to 5 s apart, the first batch's
Python worker start aside), but not the comparison: both runs see the same times, and both are
checked against :func:`reference`, computed from those times.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from affinity_pipeline.cluster import StandaloneCluster
from pyspark import cloudpickle
from pyspark.sql.streaming.stateful_processor import StatefulProcessor
from spark_app import SparkApp
from test_stateful_processor import BATCHES, Outputs, config_of, through_failures

from coordinator.config import JobConfig
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.streaming import stateful_processor_foreach_batch
from locality.spark.state import DirectoryStateStorage, write_pending

pytestmark = pytest.mark.spark

cloudpickle.register_pickle_by_value(sys.modules[__name__])

OUTPUT = "user string, fresh string, known string, last long, at long"
SHORT_MS = 10_000  # the TTL that expires between batches
HOUR_MS = 3_600_000  # the TTL that never does here
LONG_GAP_S = 12.0  # Spark's run waits this long before each batch of EXPIRING
EXPIRING = (2, 4)  # batches before which every short-TTL entry has expired

Row = tuple[str, str, str, int, int]


class Dedup(StatefulProcessor):
    """Per user: the kinds first seen while their entry lives, with a short TTL (``fresh``) and
    an hour-long one (``known``), two MapStates; the processing time of the user's previous
    batch while it lives (``last``, a ValueState with the short TTL; -1 once expired); and the
    processing time the batch was given (``at``)."""

    def init(self, handle: Any) -> None:
        self.fresh = handle.getMapState("fresh", "kind string", "at long", ttlDurationMs=SHORT_MS)
        self.known = handle.getMapState("known", "kind string", "at long", ttlDurationMs=HOUR_MS)
        self.last = handle.getValueState("last", "at long", ttlDurationMs=SHORT_MS)

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[pd.DataFrame]:
        now = timerValues.getCurrentProcessingTimeInMs()
        fresh: set[str] = set()
        known: set[str] = set()
        for pdf in rows:
            for kind in pdf["kind"]:
                for seen, new in ((self.fresh, fresh), (self.known, known)):
                    if not seen.containsKey((kind,)):
                        seen.updateValue((kind,), (now,))
                        new.add(kind)
        last = self.last.get()
        self.last.update((now,))
        yield pd.DataFrame(
            {
                "user": [key[0]],
                "fresh": [",".join(sorted(fresh))],
                "known": [",".join(sorted(known))],
                "last": [-1 if last is None else int(last[0])],
                "at": [now],
            }
        )

    def close(self) -> None:
        pass


def dedup_rows(b: int) -> list[dict[str, str]]:
    """Batch ``b``'s rows: three users, four kinds, each kind coming again and again."""
    return [{"user": f"u{i % 3}", "kind": f"k{(b + i) % 4}"} for i in range(7)]


def reference(batches: Sequence[Sequence[Mapping[str, str]]], times: Sequence[int]) -> list[Any]:
    """The output expected of :class:`Dedup` per batch, batch ``b`` run at ``times[b]``: an
    entry written at ``t`` expires at ``t + TTL`` and is gone from a batch at or past it."""
    fresh: dict[tuple[str, str], int] = {}  # (user, kind) -> expiry
    known: dict[tuple[str, str], int] = {}
    last: dict[str, tuple[int, int]] = {}  # user -> (previous time, expiry)
    out: list[list[Row]] = []
    for rows, now in zip(batches, times, strict=True):
        users: dict[str, list[str]] = {}
        for row in rows:
            users.setdefault(row["user"], []).append(row["kind"])
        batch: list[Row] = []
        for user, kinds in users.items():
            new = [_first_seen(seen, user, kinds, now, ttl) for seen, ttl in _dedups(fresh, known)]
            previous = last.get(user)
            at = previous[0] if previous is not None and now < previous[1] else -1
            last[user] = (now, now + SHORT_MS)
            batch.append((user, new[0], new[1], at, now))
        out.append(sorted(batch))
    return out


def _dedups(
    fresh: dict[tuple[str, str], int], known: dict[tuple[str, str], int]
) -> list[tuple[dict[tuple[str, str], int], int]]:
    return [(fresh, SHORT_MS), (known, HOUR_MS)]


def _first_seen(
    seen: dict[tuple[str, str], int], user: str, kinds: list[str], now: int, ttl: int
) -> str:
    """The kinds not in ``seen`` (or expired there) at ``now``, written with ``now + ttl``."""
    new = set()
    for kind in kinds:
        expiry = seen.get((user, kind))
        if expiry is None or now >= expiry:
            seen[user, kind] = now + ttl
            new.add(kind)
    return ",".join(sorted(new))


class RowOutputs(Outputs):
    """A sink keeping each batch's rows, sorted."""

    def __call__(self, df: Any, batch: int) -> None:
        self.batches[int(batch)] = rows_of(df)


def rows_of(df: Any) -> list[Any]:
    return sorted((str(u), str(f), str(k), int(la), int(at)) for u, f, k, la, at in df.collect())


def write_inbox(inbox: Path) -> None:
    inbox.mkdir(parents=True)
    for b in range(BATCHES):
        (inbox / f"{b:04d}.json").write_text("".join(json.dumps(r) + "\n" for r in dedup_rows(b)))


def spark_run(app: SparkApp, source: Path, checkpoint: Path) -> dict[int, Any]:
    """pyspark's own transformWithStateInPandas, fed ``source``'s files one batch each, waiting
    :data:`LONG_GAP_S` before the batches of :data:`EXPIRING`."""
    session = app.session
    assert session is not None
    conf = {
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        ),
        "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    }
    for name, value in conf.items():
        session.conf.set(name, value)
    outputs = RowOutputs()
    inbox = checkpoint.parent / "spark-fed"
    inbox.mkdir()
    try:
        reader = session.readStream.schema("user string, kind string")
        frame = reader.option("maxFilesPerTrigger", 1).json(str(inbox))
        result = frame.groupBy("user").transformWithStateInPandas(
            Dedup(), OUTPUT, "Update", "ProcessingTime"
        )
        query = (
            result.writeStream.foreachBatch(outputs)
            .option("checkpointLocation", str(checkpoint))
            .start()
        )
        for b in range(BATCHES):
            if b in EXPIRING:
                time.sleep(LONG_GAP_S)
            (inbox / f"{b:04d}.json").write_text((source / f"{b:04d}.json").read_text())
            query.processAllAvailable()
        query.stop()
    finally:
        for name in conf:
            session.conf.unset(name)
    return outputs.batches


def batch_timestamp(checkpoint: Path, batch: int) -> int:
    """Spark's ``batchTimestampMs`` of ``batch``, from its offset log (a line of JSON metadata
    after the version line)."""
    for line in (checkpoint / "offsets" / str(batch)).read_text().splitlines():
        if line.startswith("{") and "batchTimestampMs" in line:
            return int(json.loads(line)["batchTimestampMs"])
    raise AssertionError(f"no batchTimestampMs in Spark's offset log for batch {batch}")


def dedup_handler(session: Any, outputs: Outputs, config: JobConfig) -> Any:
    def sink(df: Any, batch: int) -> None:
        outputs.batches[int(batch)] = rows_of(df)

    return stateful_processor_foreach_batch(
        Dedup(),
        key_columns=["user"],
        output_schema=OUTPUT,
        time_mode="ProcessingTime",
        sink=sink,
        config=config,
    )


def test_a_dedup_with_ttl_expires_as_in_spark(
    app: SparkApp, spark_cluster: StandaloneCluster, zk_server: EmbeddedZooKeeper, tmp_path: Path
) -> None:
    source = tmp_path / "files"
    write_inbox(source)
    spark_checkpoint = tmp_path / "spark-checkpoint"
    expected = spark_run(app, source, spark_checkpoint)
    assert sorted(expected) == list(range(BATCHES))
    times = [batch_timestamp(spark_checkpoint, b) for b in range(BATCHES)]
    model = reference([dedup_rows(b) for b in range(BATCHES)], times)
    assert [expected[b] for b in range(BATCHES)] == model, "Spark against the reference"
    _assert_entries_expired(model, times)

    config = config_of(zk_server, tmp_path, root="/affinity-processor-ttl")
    assert config.state.checkpoint_dir is not None
    storage = DirectoryStateStorage(config.state.checkpoint_dir)
    for b, at in enumerate(times):  # affinity's batches run at Spark's times
        assert write_pending(storage, b, at) == at
    outputs = through_failures(app, spark_cluster, tmp_path, source, config, dedup_handler)
    for b in range(BATCHES):
        assert outputs.batches[b] == expected[b], f"batch {b}"


def _assert_entries_expired(model: list[Any], times: list[int]) -> None:
    """The run did what it is for: before each batch of EXPIRING every short-TTL entry had
    expired (kinds seen before are fresh again, ``last`` is gone), the hour-long ones had not."""
    for b in EXPIRING:
        assert times[b] - times[b - 1] > LONG_GAP_S * 1000
        again = [u for u, fresh, known, last, _at in model[b] if fresh and not known]
        assert again and all(last == -1 for _u, _f, _k, last, _at in model[b]), model[b]
