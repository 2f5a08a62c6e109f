"""The local Spark standalone cluster for this pipeline: :mod:`coordinator.launchers.cluster`
(installed with affinity; ``affinity dev up`` starts one too), with the pipeline's package on the
executors' ``PYTHONPATH`` so it runs even where it is not installed into the executors' Python::

    with StandaloneCluster(workdir, ["127.0.0.2", "127.0.0.3"]) as cluster:
        spark = spark_session(cluster.master_url, app_name="demo")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import affinity_pipeline
from coordinator.launchers.cluster import (
    ExecutorProcess,
    StandaloneCluster,
    free_port,
    spark_home,
)
from coordinator.launchers.cluster import executor_pythonpath as _executor_pythonpath
from coordinator.launchers.cluster import spark_session as _spark_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "ExecutorProcess",
    "StandaloneCluster",
    "executor_pythonpath",
    "free_port",
    "spark_home",
    "spark_session",
]


def executor_pythonpath() -> str:
    """The executors' ``PYTHONPATH``: affinity's folders and this package's."""
    return _executor_pythonpath(affinity_pipeline)


def spark_session(
    master: str, *, app_name: str = "affinity-pipeline", **options: Any
) -> SparkSession:
    """:func:`coordinator.launchers.cluster.spark_session` with this package on the executors'
    path."""
    return _spark_session(master, app_name=app_name, python_modules=(affinity_pipeline,), **options)
