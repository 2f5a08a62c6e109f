"""A stateful word-count query on the 3-worker cluster, run by two drivers of one job
(``tests/spark/test_streaming_two_drivers.py``): the test process is the first driver; this
module, run as a script, is the second, a Spark application of its own (a process holds one
SparkContext) on the same job name, run id, ``state.checkpoint_dir``, ZooKeeper and Spark
``checkpointLocation``::

    python second_driver.py <settings.json>

``settings.json``: ``master``, ``log4j``, ``zookeeper``, ``tmp``, ``name``, ``checkpoint``,
``cores`` (``spark.cores.max``), ``go`` and ``out``. The script starts its application, waits
until the file ``go`` exists (so its start-up, Python workers included, overlaps the first
driver's batches), runs the query until every file in the inbox is processed, then writes to
``out`` JSON with its driver's name, its reports' batch ids and each batch's sink output.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark import cloudpickle

from coordinator.config import JobConfig, load_config
from coordinator.streaming import stateful_foreach_batch
from coordinator.streaming.query import StatefulQuery

cloudpickle.register_pickle_by_value(sys.modules[__name__])

TASKS = 4
MAXP = 64


def count(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
    """Each key's rows counted (the state); the key's count so far (the output)."""
    rows = sum(len(pdf) for pdf in pdfs)
    n = (state.get[0] if state.exists else 0) + rows
    state.update((n,))
    yield pd.DataFrame({"word": [key[0]], "n": [n]})


def job_config(zookeeper: str, tmp: Path, name: str) -> JobConfig:
    return load_config(
        data={
            "job": {"name": name, "id": "1", "run_id": "r1"},
            "zookeeper": {"connect": zookeeper, "root": "/affinity-two-drivers"},
            "inputs": [{"system": "spark", "stream": "words", "partitions": TASKS}],
            "grouper": {"name": "host-affinity"},
            "coordinator": {"debounce_ms": 100, "debounce_max_ms": 1000},
            "state": {
                "checkpoint_dir": str(tmp / "durable"),
                "local_dir": str(tmp / "local"),
                "max_parallelism": MAXP,
            },
        },
        environ={},
    )


class WordQuery:
    """The query over ``<tmp>/inbox`` (one file a batch); each batch's sink output kept."""

    def __init__(
        self, session: Any, config: JobConfig, tmp: Path, checkpoint: str, hold: Any = None
    ) -> None:
        self.outputs: dict[int, list[tuple[str, int]]] = {}
        self.hold = hold  # called by the sink with the batch id before it returns
        self.handler: StatefulQuery = stateful_foreach_batch(
            count,
            key_columns=["word"],
            output_schema="word string, n long",
            state_schema="n long",
            sink=self.sink,
            config=config,
        )
        stream = session.readStream.schema("word string").option("maxFilesPerTrigger", 1)
        self.query = (
            stream.json(str(tmp / "inbox"))
            .writeStream.foreachBatch(self.handler)
            .option("checkpointLocation", str(tmp / checkpoint))
            .start()
        )

    def sink(self, df: Any, batch: int) -> None:
        self.outputs[batch] = sorted((str(w), int(n)) for w, n in df.collect())
        if self.hold is not None:
            self.hold(batch)

    def stop(self) -> None:
        self.query.stop()
        self.handler.close()


def main(settings_path: str) -> None:
    from affinity_pipeline.cluster import spark_session

    from locality.spark.jvm import JAR_CONF_KEY, spark_jar

    settings = json.loads(Path(settings_path).read_text())
    tmp = Path(settings["tmp"])
    session = spark_session(
        settings["master"],
        app_name="affinity-second-driver",
        locality_wait="30s",
        log4j_config=settings["log4j"],
        conf={JAR_CONF_KEY: str(spark_jar()), "spark.cores.max": str(settings["cores"])},
    )
    config = job_config(settings["zookeeper"], tmp, settings["name"])
    session.sparkContext.parallelize(range(4), 4).map(abs).collect()  # Python workers up
    until = time.monotonic() + 300
    while not Path(settings["go"]).exists() and time.monotonic() < until:
        time.sleep(0.1)
    query = WordQuery(session, config, tmp, settings["checkpoint"])
    try:
        query.query.processAllAvailable()
        driver = query.handler.commits.lease.driver if query.handler.commits else None
        reports = [r.batch for r in query.handler.reports]
    finally:
        query.stop()
        session.stop()
    result = {"driver": driver, "pid": os.getpid(), "reports": reports, "outputs": query.outputs}
    Path(settings["out"]).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
